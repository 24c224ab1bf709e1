;;;; capture.lisp --- running user code in a controlled dynamic environment.
;;;;
;;;; RUN-CAPTURED is the one place that knows how user code is run: output
;;;; captured per stream and capped, standard input from a string (never the
;;;; protocol's stdin), the debugger replaced by an unwind that records the
;;;; condition and a backtrace of user frames, warnings collected, and an
;;;; interrupt point that another thread can use (INTERRUPT-EVALUATION).

(in-package #:cl-mcp-server)

;;; A capped output stream whose latest line another thread can read.

(defconstant +status-line-limit+ 500)

(defclass capture-stream (#.(gray-symbol "FUNDAMENTAL-CHARACTER-OUTPUT-STREAM"))
  ((buffer :initform (make-string-output-stream))
   (limit :initarg :limit :initform nil)
   (written :initform 0)
   (dropped :initform 0)
   (column :initform 0)
   (line :initform (make-array +status-line-limit+ :element-type 'character
                                                    :adjustable t :fill-pointer 0))
   (last-line :initform nil)
   ;; When non-NIL: after this many dropped characters, writing throws to
   ;; CAPTURE-FULL, so printing an endless (circular) structure ends.
   (stop-after :initarg :stop-after :initform nil)
   (stopped :initform nil)
   (lock :initform (swank/backend:make-lock :name "cl-mcp capture"))))


(defun make-capture-stream (limit &key stop-after)
  (make-instance 'capture-stream :limit limit :stop-after stop-after))

(defun check-stop (stream)
  "Throw to CAPTURE-FULL when STREAM has dropped more than it may."
  (with-slots (stop-after dropped stopped) stream
    (when (and stop-after (> dropped stop-after))
      (setf stopped t)
      (throw 'capture-full nil))))

(defun note-text (stream string start end)
  "Accept STRING[start,end) into STREAM's buffer up to its limit and keep
its current and last complete line up to date. Called with the lock held."
  (with-slots (buffer limit written dropped column line last-line) stream
    (let* ((count (- end start))
           (room (if limit (max 0 (- limit written)) count))
           (take (min room count)))
      (when (plusp take)
        (write-string string buffer :start start :end (+ start take))
        (incf written take))
      (incf dropped (- count take))
      (let ((newline (position #\Newline string :start start :end end :from-end t)))
        (cond (newline
               ;; The line completed by this text (if any) becomes the last line.
               (let ((prev (position #\Newline string :start start :end newline :from-end t)))
                 (append-to-line line string (if prev (1+ prev) start) newline)
                 (when (plusp (length (string-trim " 	" line)))
                   (setf last-line (copy-seq line))))
               (setf (fill-pointer line) 0)
               (append-to-line line string (1+ newline) end)
               (setf column (- end newline 1)))
              (t
               (append-to-line line string start end)
               (incf column count)))))))

(defun append-to-line (line string start end)
  "Append STRING[start,end) to LINE (made with room for
+STATUS-LINE-LIMIT+ characters), up to that many in all: one REPLACE, not a
loop per character (which made printing megabytes slow on CLISP)."
  (let* ((fill (fill-pointer line))
         (n (max 0 (min (- end start) (- +status-line-limit+ fill)))))
    (when (plusp n)
      (setf (fill-pointer line) (+ fill n))
      (replace line string :start1 fill :start2 start :end2 (+ start n)))))

(defmethod #.(gray-symbol "STREAM-WRITE-CHAR") ((stream capture-stream) char)
  (swank/backend:call-with-lock-held
   (slot-value stream 'lock)
   (lambda () (note-text stream (string char) 0 1)))
  (check-stop stream)
  char)

(defmethod #.(gray-symbol "STREAM-WRITE-STRING") ((stream capture-stream) string
                                           &optional start end)
  (let ((start (or start 0))
        (end (or end (length string))))
    (swank/backend:call-with-lock-held
     (slot-value stream 'lock)
     (lambda () (note-text stream string start end))))
  (check-stop stream)
  string)

;; CLISP's WRITE-STRING, WRITE-LINE and FORMAT hand a Gray stream whole
;; strings only through its own STREAM-WRITE-CHAR-SEQUENCE, whose default
;; calls STREAM-WRITE-CHAR per character: 1 MB of output took 5.6 s.
;; Stays here, not in impl-clisp.lisp: a method on CAPTURE-STREAM, a class
;; this file defines after the impl files are loaded.
#+clisp
(defmethod gray:stream-write-char-sequence ((stream capture-stream) sequence
                                            &optional (start 0) end)
  (if (stringp sequence)
      (#.(gray-symbol "STREAM-WRITE-STRING") stream sequence start end)
      (loop for i from start below (or end (length sequence))
            do (#.(gray-symbol "STREAM-WRITE-CHAR") stream (elt sequence i))))
  sequence)

(defmethod #.(gray-symbol "STREAM-LINE-COLUMN") ((stream capture-stream))
  (slot-value stream 'column))

(defmethod #.(gray-symbol "STREAM-FORCE-OUTPUT") ((stream capture-stream)) nil)
(defmethod #.(gray-symbol "STREAM-FINISH-OUTPUT") ((stream capture-stream)) nil)

(defun capture-contents (stream)
  "Everything written to STREAM (up to its limit), with the
[truncated N characters] marker when more was written."
  (swank/backend:call-with-lock-held
   (slot-value stream 'lock)
   (lambda ()
     (with-slots (buffer dropped stopped) stream
       (let ((text (get-output-stream-string buffer)))
         ;; GET-OUTPUT-STREAM-STRING empties the buffer: put it back so a
         ;; second call sees the same text.
         (write-string text buffer)
         (cond (stopped
                (format nil "~A~%[truncated at least ~D characters: printing stopped]"
                        text dropped))
               ((plusp dropped)
                (format nil "~A~%[truncated ~D characters]" text dropped))
               (t text)))))))

(defun shares-structure-p (object &optional (max-nodes 100000) (max-depth 100))
  "True when OBJECT's conses and (non-string) arrays reach some cons or
array twice, e.g. a circular list; checks at most MAX-NODES nodes, and
nothing nested deeper than MAX-DEPTH (lists in lists, arrays in arrays),
which a printer bound by *PRINT-LEVEL* never reaches (and walking it would
run out of stack). Used instead of *PRINT-CIRCLE* alone because SBCL's
circularity pass runs PRINT-OBJECT methods to a null stream first, so an
endless method (or report function) would loop there before any cap could
stop it."
  (let ((seen (make-hash-table :test 'eq)) (count 0))
    (labels ((visit (x)
               ;; True when X is a cons or array to walk into.
               (when (or (consp x) (and (arrayp x) (not (stringp x))))
                 (when (or (gethash x seen) (> (incf count) max-nodes))
                   (return-from shares-structure-p (gethash x seen)))
                 (setf (gethash x seen) t)))
             (walk (x depth)
               (when (and (< depth max-depth) (visit x))
                 (if (consp x)
                     ;; Along the list's spine without recursion.
                     (loop for tail = x then (cdr tail)
                           do (walk (car tail) (1+ depth))
                           while (and (consp (cdr tail)) (visit (cdr tail)))
                           finally (walk (cdr tail) depth))
                     ;; Specialised arrays (octets, floats) hold no
                     ;; conses; big general ones are sampled, not walked.
                     (when (eq (array-element-type x) t)
                       (dotimes (i (min (array-total-size x) max-nodes))
                         (walk (row-major-aref x i) (1+ depth))))))))
      (walk object 0)
      nil)))

(defun condition-arguments (object)
  "What a condition's report prints: its format arguments, when known."
  (if (typep object 'simple-condition)
      (ignore-errors (simple-condition-format-arguments object))
      object))

(defun print-capped (object limit &key (escape nil) (length 1000) (level 20))
  "OBJECT printed (PRINC, or PRIN1 when ESCAPE) into a capped stream: at
most LIMIT characters with the truncation marker, *PRINT-CIRCLE* true and
bounded *PRINT-LENGTH*/*PRINT-LEVEL*, and printing stops once LIMIT more
characters were dropped, so a circular or huge object (in a condition's
message, a restart's report) can never exhaust the heap. Never signals."
  (let ((out (make-capture-stream limit :stop-after limit)))
    (handler-case
        (let ((*print-circle* (shares-structure-p (condition-arguments object)))
              (*print-length* length) (*print-level* level)
              (*print-readably* nil) (*print-pretty* nil))
          (catch 'capture-full
            (if escape (prin1 object out) (princ object out)))
          (capture-contents out))
      (error ()
        (format nil "#<error printing object of type ~A>"
                (ignore-errors (type-name object)))))))

;;; Keeping a reply under Swank's message limit.
;;;
;;; Swank writes each message with a 6-hex-digit length header: a message
;;; over 16 MiB of UTF-8 (after PRIN1 escaping) kills the connection. Every
;;; reply is therefore fitted to a byte budget, whatever the caller's
;;; character caps are.

(defparameter *reply-byte-budget* (* 8 1024 1024)
  "Bytes (UTF-8, escapes counted) that the strings of one reply may take.")

(defun wire-size (string &key (start 0) (end (length string)))
  "Bytes STRING[START,END) takes in a Swank message: UTF-8, plus one for
each character PRIN1 escapes."
  (loop for i from start below end
        for code = (char-code (char string i))
        sum (cond ((or (= code 34) (= code 92)) 2)
                  ((< code #x80) 1)
                  ((< code #x800) 2)
                  ((< code #x10000) 3)
                  (t 4))))

(defun cut-to-wire-size (string budget)
  "STRING, or its head with the [truncated N characters] marker, taking at
most BUDGET bytes on the wire."
  (if (<= (wire-size string) budget)
      string
      (let ((room (max 0 (- budget 64))) (used 0) (end 0))
        (loop for i from 0 below (length string)
              for size = (wire-size string :start i :end (1+ i))
              while (<= (+ used size) room)
              do (incf used size) (setf end (1+ i)))
        (format nil "~A~%[truncated ~D characters]"
                (subseq string 0 end) (- (length string) end)))))

(defun fit-strings (strings budget)
  "STRINGS (a list; NILs kept) cut so that together they take at most
BUDGET bytes on the wire. Small strings are kept whole; the large ones
share what is left equally."
  (let* ((items (loop for s in strings for i from 0
                      when (stringp s) collect (list i s (wire-size s))))
         (result (coerce strings 'vector))
         (remaining budget)
         (left (length items)))
    (dolist (item (sort items #'< :key #'third))
      (destructuring-bind (i s size) item
        (let ((share (floor (max 0 remaining) (max 1 left))))
          (if (<= size share)
              (decf remaining size)
              (let ((cut (cut-to-wire-size s share)))
                (setf (aref result i) cut)
                (decf remaining (wire-size cut)))))
        (decf left)))
    (coerce result 'list)))

(defun capture-status-line (stream)
  "The line being written, or the last complete non-blank line."
  (swank/backend:call-with-lock-held
   (slot-value stream 'lock)
   (lambda ()
     (with-slots (line last-line) stream
       (if (plusp (length (string-trim " 	" line)))
           (copy-seq line)
           last-line)))))

;;; Running evaluations, visible to other threads.

(defstruct (evaluation (:constructor %make-evaluation))
  id thread stdout stderr (start (get-internal-real-time))
  ;; The evaluation's own ABORT restart ("Abandon this evaluation."): the
  ;; debugger lists the restarts down to it, never Swank's outer ones.
  abort-restart
  ;; *PACKAGE* where the evaluation entered the debugger (forms sent to the
  ;; debugger are read there).
  package
  ;; True once it is over (its trace records still open never return).
  ended)

(defvar *evaluations* '()
  "Evaluations running right now (EVALUATION structs), newest first.")

(defvar *evaluations-lock* (swank/backend:make-lock :name "cl-mcp evaluations"))

(defvar *current-evaluation* nil
  "Bound, in the evaluating thread, to its EVALUATION while inside the catch
that INTERRUPT-EVALUATION throws to. Outside that extent an interrupt is a
no-op, so a late interrupt can never hit the next request.")

(defun register-evaluation (evaluation)
  (swank/backend:call-with-lock-held
   *evaluations-lock* (lambda () (push evaluation *evaluations*))))

(defun unregister-evaluation (evaluation)
  (setf (evaluation-ended evaluation) t)
  (swank/backend:call-with-lock-held
   *evaluations-lock*
   (lambda () (setf *evaluations* (remove evaluation *evaluations*)))))

(defun running-evaluations (&optional id)
  (swank/backend:call-with-lock-held
   *evaluations-lock*
   (lambda ()
     (remove-if-not (lambda (e) (or (null id) (equal id (evaluation-id e))))
                    *evaluations*))))

;;; Backtraces of user frames.

(defun frame-name-symbol (name)
  "The symbol that says whose frame NAME is: FOO for FOO, (SETF FOO),
(LAMBDA () :IN FOO), (FLET BAR :IN FOO), (FAST-METHOD FOO ...)."
  (cond ((symbolp name) name)
        ((consp name)
         (let ((in (member :in name)))
           (cond ((and in (symbolp (second in))) (second in))
                 ((and in (consp (second in))) (frame-name-symbol (second in)))
                 ;; (FLET NAME :IN "file"): the local function's own name.
                 ((and in (symbolp (second name))
                       (member (symbol-name (first name)) '("FLET" "LABELS")
                               :test #'string=))
                  (second name))
                 (in nil)
                 ((and (symbolp (first name))
                       (member (symbol-name (first name))
                               '("SETF" "FAST-METHOD" "SLOW-METHOD" "METHOD"
                                 "FLET" "LABELS" "LABELS" "MACRO-FUNCTION")
                               :test #'string=))
                  (frame-name-symbol (second name)))
                 ((symbolp (first name))
                  (and (not (member (symbol-name (first name))
                                    '("LAMBDA" "SB-C::TOP-LEVEL-FORM")
                                    :test #'string=))
                       (first name))))))
        (t nil)))

(defun our-package-p (package)
  (and package
       (let ((name (package-name package)))
         (or (eq package (find-package "CL-MCP-SERVER"))
             (string= name "SWANK")
             (and (> (length name) 6) (string= "SWANK/" name :end2 6))
             (and (> (length name) 6) (string= "SWANK-" name :end2 6))))))

(defun interrupt-machinery-p (symbol)
  "Frames of the implementation's interrupt delivery."
  (and symbol (symbol-package symbol)
       (implementation-internal-package-p (symbol-package symbol))
       (some (lambda (word) (search word (symbol-name symbol)))
             '("INTERRUPT" "SIGURG" "SIGNAL-HANDLER" "SIGALRM"))))

(defparameter *helper-directory*
  (let ((file (or *compile-file-truename* *load-truename*)))
    (and file (directory-namestring file)))
  "The directory the server's helper sources were compiled from.")

(defun helper-local-frame-p (name)
  "A local function of the server's helpers that the compiler names by its
file, e.g. (FLET \"LAMBDA0\" :IN \"/.../debug.lisp\") (the body of a
WITH-COMPILATION-UNIT)."
  (let ((in (and (consp name) (member :in name))))
    (and in (stringp (second in)) *helper-directory*
         (eql 0 (search *helper-directory* (second in))))))

(defun machinery-frame-p (name text &optional keep-internal)
  "Frames that are signalling/evaluation machinery rather than user code.
With KEEP-INTERNAL, the implementation's own functions count as code (an
interrupt may land inside SLEEP's internals; that is where it was)."
  (let ((symbol (frame-name-symbol name)))
    (cond ((stringp name) t)          ; foreign functions
          ((null name)
           ;; Unknown name: judge by the printed text, a local function's
           ;; by the name it is local to ("(FLET SWANK/BACKEND:COMPUTE-
           ;; BACKTRACE) 0 80)": ABCL's Swank frames before abcl-introspect
           ;; has named its functions).
           (let* ((text (string-left-trim "(" text))
                  (text (if (or (eql 0 (search "FLET " text))
                                (eql 0 (search "LABELS " text)))
                            (subseq text (1+ (position #\Space text)))
                            text)))
             (or (eql 0 (search "SWANK" text))
                 (eql 0 (search "CL-MCP-SERVER" text)))))
          ((helper-local-frame-p name) t)
          ((null symbol) nil)
          ((our-package-p (symbol-package symbol)) t)
          ((interrupt-machinery-p symbol) t)
          ((and (implementation-internal-package-p (or (symbol-package symbol)
                                                       (find-package "KEYWORD")))
                (not keep-internal))
           t)
          ((member symbol '(error cerror signal warn invoke-debugger break
                            eval funcall apply))
           t)
          (t nil))))

(defun sentinel-frame-p (name)
  (let ((symbol (frame-name-symbol name)))
    (eq symbol 'call-with-user-code)))

(defun traced-call-frame (frame inner-name)
  "How the user sees FRAME when it is the tracer's wrapper around a call
of a traced function (TRACER-FRAME-CALL): :HIDE when the frame just inside
it (named INNER-NAME) is that function's own, else (values NAME CALL),
CALL the call as a list (its own frame is gone: a tail call, or a :BREAK
before it). NIL for every other frame."
  (multiple-value-bind (name args) (tracer-frame-call frame)
    (cond ((null name) nil)
          ((and inner-name (eq (frame-name-symbol name) (frame-name-symbol inner-name)))
           :hide)
          (t (values name (cons name args))))))

(defun raw-backtrace (count &optional names-only)
  "Up to COUNT frames from the current stack top as (name . text). With
NAMES-ONLY the text is the function's name without the arguments: printing
arguments runs their PRINT-OBJECT methods, which may loop, and an interrupt
handler must never run user code."
  (let ((frames '()))
    (ignore-errors
     (call-with-top-frames
      count
      (lambda ()
        (let ((inner nil))
          (dolist (frame (swank/backend:compute-backtrace 0 count))
            (multiple-value-bind (traced call) (traced-call-frame frame inner)
              ;; FRAME-VIEW (debug.lisp): ECL's and CLISP's frames as
              ;; calls, their machinery frames :SKIP. It prints a frame's
              ;; description, so not when only names may be printed.
              (multiple-value-bind (name view)
                  (if names-only
                      (frame-function-name frame)
                      (funcall 'frame-view frame))
                (setf inner (frame-function-name frame))
                (unless (or (eq traced :hide) (eq name :skip))
                  (let ((text (handler-case
                                  (let ((*print-length* 10) (*print-level* 4)
                                        (*print-readably* nil) (*print-pretty* nil)
                                        (s (make-capture-stream 400 :stop-after 400)))
                                    (catch 'capture-full
                                      (cond (names-only
                                             (format s "(~S ...)" (or traced name)))
                                            (traced (prin1 call s))
                                            (view (write-string view s))
                                            (t (print-frame-text frame s))))
                                    (capture-contents s))
                                (error () "#<frame>"))))
                    (push (cons (or traced name)
                                (truncate-string (substitute #\Space #\Newline text) 400))
                          frames))))))))))
    (nreverse frames)))

(defun user-backtrace (&optional (limit 20) keep-internal drop)
  "The user's part of the current stack as a list of (index text): leading
machinery (signalling, interrupt delivery, our handlers) dropped, and the
stack cut where user code was entered (CALL-WITH-USER-CODE), minus the
evaluator frames just above it. DROP, when given, is a function of a
frame's name: frames it is true for are left out too (a build's ASDF
frames)."
  (let* ((frames (raw-backtrace (+ limit (if drop 200 60)) keep-internal))
         (cut (position-if (lambda (f) (sentinel-frame-p (car f))) frames))
         (frames (if cut (subseq frames 0 cut) frames))
         (start (or (position-if-not (lambda (f) (machinery-frame-p (car f) (cdr f)
                                                                    keep-internal))
                                     frames)
                    (length frames)))
         (frames (subseq frames start))
         (frames (if cut
                     (let ((end (position-if-not (lambda (f) (machinery-frame-p (car f) (cdr f)))
                                                 frames :from-end t)))
                       ;; An interrupt can land in internal code right
                       ;; above the evaluator: keep that frame.
                       (cond (end (subseq frames 0 (1+ end)))
                             ((and keep-internal frames) (subseq frames 0 1))
                             (t '())))
                     frames))
         (frames (remove-if (lambda (f)
                              (let ((s (frame-name-symbol (car f))))
                                (or (and s (our-package-p (symbol-package s)))
                                    (and drop (funcall drop (car f))))))
                            frames)))
    (loop for f in frames
          for i from 0 below limit
          collect (list i (cdr f)))))

(defun call-with-user-code (thunk)
  "Marks where user code starts on the stack (backtraces stop here)."
  (declare (notinline call-with-user-code))
  (multiple-value-prog1 (funcall thunk)
    ;; Keeps this frame from being a tail call, so it stays on the stack.
    (values)))

(defun type-name-of-symbol (symbol)
  (let ((*package* (find-package "COMMON-LISP-USER")))
    (prin1-to-string* symbol)))

(defun restarts-since (condition outer-restarts)
  "The restarts active for CONDITION that are not in OUTER-RESTARTS (the
ones around the evaluation), innermost first as the debugger lists them."
  (remove-if (lambda (r) (member r outer-restarts)) (compute-restarts condition)))

(defun restart-descriptions (restarts)
  (loop for r in restarts
        for i from 0 below 50
        collect (let ((name (restart-name r))
                      (report (print-capped r 1000)))
                  (if name
                      (format nil "~A: ~A" (type-name-of-symbol name) report)
                      report))))

(defun reader-problem-message (condition)
  "What CONDITION, signalled while reading code, says, for people: the end
of input inside a form named as a missing closing parenthesis or quote,
and the reader's stream (#<SB-IMPL::STRING-INPUT-STREAM {...}>) left out
of the message (its line and column stay)."
  (if (typep condition 'end-of-file)
      "End of input inside a form: a closing parenthesis or string quote is missing."
      (let* ((text (condition-message condition))
             (stream-at (search "Stream: #<" text)))
        (string-right-trim '(#\Space #\Tab #\Newline #\Return #\,)
                           (if stream-at (subseq text 0 stream-at) text)))))

(defun file-error-tried (condition)
  "For a FILE-ERROR whose pathname is relative (LOAD \"anagram\"), the
absolute path it meant: \" [looked for /dir/anagram]\", merged as LOAD and
OPEN merge it, with *DEFAULT-PATHNAME-DEFAULTS*; else \"\"."
  (let* ((given (and (typep condition 'file-error)
                     (ignore-errors (pathname (file-error-pathname condition)))))
         (absolute (and given (ignore-errors (namestring (merge-pathnames given))))))
    (if (and absolute (string/= absolute (ignore-errors (namestring given))))
        (format nil " [looked for ~A]" absolute)
        "")))

(defun condition-report (condition limit)
  "CONDITION's report capped at LIMIT, with the absolute path a file error
tried (FILE-ERROR-TRIED)."
  (concatenate 'string (print-capped condition limit) (file-error-tried condition)))

(defun condition-message (condition)
  "CONDITION's report, capped. An arithmetic error some Lisps (ECL) print
unreadably (#<a DIVISION-BY-ZERO ...>) is described by its operation and
operands instead."
  (let ((text (condition-report condition 20000)))
    (if (and (typep condition 'arithmetic-error)
             (eql 0 (search "#<" text)))
        (let ((op (ignore-errors (arithmetic-error-operation condition)))
              (args (ignore-errors (arithmetic-error-operands condition))))
          (let ((*print-length* 10) (*print-level* 3))
            (format nil "~A~@[ in ~S~]~@[ on ~S~]"
                    (string-downcase (substitute #\Space #\- (type-name condition)))
                    op args)))
        text)))

(defun condition-plist (condition &key backtrace restarts)
  (list :type (type-name condition)
        :message (condition-message condition)
        :restarts (restart-descriptions restarts)
        :backtrace backtrace))

;;; The runner.

(defun format-warning (condition &optional (limit 5000))
  (format nil "~A: ~A" (type-name condition) (print-capped condition limit)))

(defparameter *max-warnings* 200
  "At most this many warnings are listed per request.")

(defun enter-debugger (condition)
  "Suspend this thread in Swank's debugger (SLDB) on CONDITION: Swank
sends :debug to the connection that made the request and serves its
requests on this thread until a restart is invoked. Nested errors enter
nested levels."
  (when *current-evaluation*
    (setf (evaluation-package *current-evaluation*) *package*))
  (flet ((hook (c h)
           (declare (ignore h))
           (enter-debugger c)))
    (call-with-debugger-hooks
     #'hook
     (lambda () (swank::swank-debugger-hook condition nil)))))

;; Long: one user evaluation's dynamic context (streams, hooks, handlers, catch) in the order it is set up.
(defvar *image-notices* '()
  "What the helpers have to tell the user once (newest first): handed out
with the next RUN-CAPTURED result, as its :NOTICES, which the server shows
as [NOTICE] lines (e.g. the Quicklisp stand-in's first use).")

(defun note-image-notice (text)
  (pushnew text *image-notices* :test #'string=))

(defun take-image-notices ()
  (let ((notices (reverse *image-notices*)))
    (setf *image-notices* '())
    notices))

(defun run-captured (thunk &key id (max-output 50000) stdin
                             (backtrace-limit 20) (warnings :collect)
                             (on-warning nil) debug)
  "Run THUNK (a function of no arguments) as user code.

Returns a plist: :VALUE (the list of THUNK's values, when it returned),
:STDOUT, :STDERR (capped at MAX-OUTPUT characters each), :WARNINGS (strings
\"TYPE: message\", when WARNINGS is :COLLECT; :MUFFLE drops them; :PASS lets
them through), :ELAPSED-MS, and :ERROR (a plist :TYPE :MESSAGE :RESTARTS
:BACKTRACE) or :INTERRUPTED T with :WHERE (frames where it was).
ON-WARNING, when given, is called with each warning first. With DEBUG,
what reaches the debugger suspends the evaluation in Swank's debugger
(ENTER-DEBUGGER) instead of ending it."
  (let* ((start (get-internal-real-time))
         (stdout (make-capture-stream max-output))
         (stderr (make-capture-stream max-output))
         (input (make-string-input-stream (or stdin "")))
         (io (make-io-stream input stdout))
         (evaluation (%make-evaluation :id id :thread (swank/backend:current-thread)
                                       :stdout stdout :stderr stderr))
         (collected '())
         (warning-count 0)
         (warning-chars 0)
         (warnings-dropped 0)
         (outer-restarts (compute-restarts))
         (outcome nil))
    (register-evaluation evaluation)
    (unwind-protect
         (setf outcome
               (catch evaluation
                 (let ((*current-evaluation* evaluation)
                       (*standard-output* stdout)
                       (*error-output* stderr)
                       (*trace-output* stdout)
                       (*standard-input* input)
                       (*terminal-io* io)
                       (*query-io* io)
                       (*debug-io* io))
                   (flet ((fail (condition)
                            (throw evaluation
                              (list :error
                                    (condition-plist
                                     condition
                                     :backtrace (user-backtrace backtrace-limit)
                                     :restarts (restarts-since condition
                                                               outer-restarts)))))
                          ;; A Lisp without threads is interrupted by a
                          ;; signal (impl-clisp.lisp): an interruption,
                          ;; taken here before any outer handler sees it.
                          (interruption (c)
                            (when (interrupt-condition-p c)
                              (interrupt-here evaluation))))
                     (call-with-debugger-hooks
                      (lambda (condition hook)
                        (declare (ignore hook))
                        (if debug
                            (enter-debugger condition)
                            (fail condition)))
                      (lambda ()
                       (call-without-outer-handlers
                        (lambda ()
                        (handler-bind
                            ((condition #'interruption)
                             (warning
                               (lambda (w)
                                 ;; A handler runs without the handlers
                                 ;; bound here: a signal arriving while it
                                 ;; works is taken by its own binding.
                                 (handler-bind ((condition #'interruption))
                                   (when on-warning (funcall on-warning w))
                                   (unless (eq warnings :pass)
                                     (when (and (eq warnings :collect)
                                                (not (ignorable-warning-p w)))
                                       ;; Capped in count and characters:
                                       ;; thousands of warnings must not
                                       ;; swamp the reply.
                                       (if (or (>= warning-count *max-warnings*)
                                               (>= warning-chars max-output))
                                           (incf warnings-dropped)
                                           (let ((text (format-warning
                                                        w (max 100 (min 5000 (- max-output warning-chars))))))
                                             (incf warning-count)
                                             (incf warning-chars (length text))
                                             (push text collected))))
                                     (let ((r (find-restart 'muffle-warning w)))
                                       (when r (invoke-restart r))))))))
                          ;; No handler for errors here: a condition that
                          ;; is only SIGNALed (even an ERROR) and returns
                          ;; is not a failure. What reaches the debugger
                          ;; (ERROR, CERROR, INVOKE-DEBUGGER, stack
                          ;; exhaustion) goes through the hooks above.
                          ;; (abort) in user code ends this evaluation, not
                          ;; Swank's request or its worker thread.
                          (restart-case
                              (progn
                                ;; Restarts the user code establishes are
                                ;; the ones worth listing.
                                (setf outer-restarts (compute-restarts))
                                (setf (evaluation-abort-restart evaluation)
                                      (find-restart 'abort))
                                (list :value (multiple-value-list
                                              (if debug
                                                  ;; STEP stops in the debugger.
                                                  (call-with-stepper
                                                   (lambda () (call-with-user-code thunk)))
                                                  (call-with-user-code thunk)))))
                            (abort ()
                              :report "Abandon this evaluation."
                              (list :error
                                    (list :type "ABORT"
                                          :message (if debug
                                                       "The evaluation was abandoned (the ABORT restart, from the code or the debugger)."
                                                       "The code invoked the ABORT restart: the evaluation was abandoned.")
                                          :restarts nil :backtrace nil))))))
                        (if debug #'enter-debugger #'fail))))))))
      (unregister-evaluation evaluation))
    (when (getf (cddr outcome) :collect)
      (release-memory (second outcome)))
    (append
     (cond ((eq (first outcome) :value) (list :value (second outcome)))
           ((eq (first outcome) :error) (list :error (second outcome)))
           ((eq (first outcome) :interrupted)
            (list :error nil :interrupted t :where (second outcome)))
           (t (list :error (list :type "UNKNOWN" :message "Evaluation ended abnormally."
                                 :restarts nil :backtrace nil))))
     (list :stdout (capture-contents stdout)
           :stderr (capture-contents stderr)
           :warnings (if (plusp warnings-dropped)
                         (reverse (cons (format nil "[~D more warnings]" warnings-dropped)
                                        collected))
                         (reverse collected))
           :elapsed-ms (milliseconds-since start)
           :notices (take-image-notices)))))

(defun interrupt-here (evaluation)
  "Runs in the interrupted thread: unwind EVALUATION to its top level,
recording where it was. A no-op when that evaluation is already over."
  (when (eq *current-evaluation* evaluation)
    (throw evaluation
      (list :interrupted (mapcar #'second (user-backtrace 8 t))))))

(defun interrupt-evaluation (&optional id)
  "Interrupt the running evaluation ID (every running one when ID is NIL):
it unwinds to its top level and returns :INTERRUPTED T with :WHERE.
Call it from another thread. Returns (:interrupted (ID...))."
  (let ((targets (running-evaluations id)))
    (dolist (e targets)
      (let ((e e))
        (ignore-errors
         (deliver-interrupt (evaluation-thread e)
                            (lambda () (interrupt-here e))))))
    (list :interrupted (mapcar #'evaluation-id targets))))

;;; The memory limit (--memory-limit): a soft limit on the heap, checked
;;; after each garbage collection where the implementation runs a hook then
;;; (CALL-AFTER-EACH-GC: SBCL). Past it, the running evaluation is stopped
;;; as an interrupt stops it, its data is freed, and the image lives on; the
;;; runtime's own heap cap, set well above by the server, is the last resort.

(defvar *memory-limit* nil
  "Bytes of heap the evaluations may keep in use, from the server's
CL_MCP_MEMORY_LIMIT_MB; NIL: no limit.")

(defvar *checking-memory* nil
  "True in a thread running CHECK-MEMORY-LIMIT (its full collection runs
the after-GC hooks again).")

(defun read-memory-limit ()
  "Sets *MEMORY-LIMIT* from the environment the server gave this process."
  (let* ((text (ignore-errors (uiop:getenv "CL_MCP_MEMORY_LIMIT_MB")))
         (mb (and text (ignore-errors (parse-integer text)))))
    (setf *memory-limit* (and mb (plusp mb) (* mb 1024 1024)))))

(defun megabytes (bytes)
  (round bytes (* 1024 1024)))

(defvar *check-above* 0
  "After a check found more live data than the limit (data kept in global
variables), the next check waits until the heap grows by an eighth of the
limit beyond it, so the collections that follow are not all full ones.")

(defun check-memory-limit ()
  "After a collection: when the heap in use passes *MEMORY-LIMIT*, collect
every generation, and if live data alone still passes it, stop the
evaluation (garbage that the collection just run left in older generations
is no reason to stop anything)."
  (let ((limit *memory-limit*))
    (when (and limit (not *checking-memory*))
      (let ((used (heap-in-use)))
        (when (and used (> used (max limit *check-above*)))
          (let ((*checking-memory* t))
            (collect-all-garbage)
            (let ((live (heap-in-use)))
              (setf *check-above* (if (> live limit) (+ live (floor limit 8)) 0))
              (when (> live limit)
                (stop-evaluations-over-limit live)))))))))

(defun stop-evaluations-over-limit (live)
  "Stops the evaluation of this thread, the one allocating; when this
thread runs none (a thread of the user's, Swank's), every running one.
Through an interrupt, so a thread that has interrupts disabled is stopped
once it enables them."
  (let ((targets (if (and *current-evaluation*
                          (not (evaluation-ended *current-evaluation*)))
                     (list *current-evaluation*)
                     (running-evaluations))))
    (dolist (e targets)
      (let ((e e))
        (ignore-errors
         (deliver-interrupt (evaluation-thread e)
                            (lambda () (memory-limit-here e live))))))))

(defun implementation-frame-p (name)
  "A frame of a foreign function or of the implementation's internals."
  (or (stringp name)
      (let ((s (frame-name-symbol name)))
        (and s (symbol-package s)
             (implementation-internal-package-p (symbol-package s))))))

(defun memory-limit-here (evaluation live)
  "Runs in the evaluating thread: unwind EVALUATION to its top level with
the memory limit's error. A no-op when that evaluation is already over.
Only names are recorded (no arguments printed: the thread may be deep in
the collector's hooks)."
  (when (eq *current-evaluation* evaluation)
    (throw evaluation
      (list :error
            (list :type "MEMORY-LIMIT-EXCEEDED"
                  :message (format nil "The evaluation kept more than the ~D MB memory ~
limit (--memory-limit) in use: ~D MB of live data after a full garbage ~
collection. It was stopped; the image and its definitions are kept."
                                   (megabytes *memory-limit*) (megabytes live))
                  :restarts nil
                  :backtrace (user-backtrace 8 t #'implementation-frame-p))
            :collect t))))

(defun release-memory (plist)
  "After an evaluation stopped at the memory limit has unwound: collect
its data at once (it sits in old generations a nursery collection would
not look at) and say how much is in use now in PLIST's message (an error plist)."
  (let ((*checking-memory* t))
    (collect-all-garbage))
  (let ((now (heap-in-use)))
    (when (and now *memory-limit* (<= now *memory-limit*))
      (setf *check-above* 0))
    (when now
      (setf (getf plist :message)
            (format nil "~A Its data is freed: ~D MB of heap in use now."
                    (getf plist :message) (megabytes now))))))

(read-memory-limit)
(when (call-after-each-gc 'check-memory-limit)
  (call-at-each-start 'read-memory-limit))

(defun eval-status (&optional id)
  "The newest running evaluation (or the one with ID): (:running T :id ID
:elapsed-ms N :line LATEST-OUTPUT-LINE :stdout-chars N), or (:running NIL).
Safe to call from any thread."
  (let ((e (first (running-evaluations id))))
    (if e
        (list :running t
              :id (evaluation-id e)
              :elapsed-ms (milliseconds-since (evaluation-start e))
              :line (or (capture-status-line (evaluation-stdout e))
                        (capture-status-line (evaluation-stderr e)))
              :stdout-chars (slot-value (evaluation-stdout e) 'written))
        (list :running nil))))
