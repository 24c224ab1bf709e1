;;;; impl-clisp.lisp --- the GNU CLISP layer: what impl-sbcl.lisp's portable
;;;; fallbacks cannot know on CLISP, through CLISP's own API and Swank's
;;;; swank/clisp backend.
;;;;
;;;; Loaded after impl-sbcl.lisp, whose definitions these replace on CLISP
;;;; only; on any other Lisp this file is empty. CLISP has no threads here:
;;;; the image serves Swank on its one thread (see src/image/boot.lisp).

(in-package #:cl-mcp-server)

#+clisp
(progn
  (defun printed-function-symbol (text)
    "The function a CLISP frame's description names as #<COMPILED-FUNCTION
PKG::NAME>, #<SYSTEM-FUNCTION NAME> or #<FUNCTION NAME ...>, found (never
interned); a local function's CLISP name (FOO-1-2) gives FOO. Or NIL."
    (dolist (prefix '("#<COMPILED-FUNCTION " "#<SYSTEM-FUNCTION " "#<FUNCTION "))
      (let ((at (search prefix text)))
        (when at
          (let* ((start (+ at (length prefix)))
                 (end (position-if (lambda (c) (member c '(#\Space #\>))) text :start start))
                 (token (subseq text start end))
                 (colon (position #\: token))
                 (package (if colon
                              (find-package (if (zerop colon) "KEYWORD" (subseq token 0 colon)))
                              (find-package "COMMON-LISP-USER")))
                 (name (if colon (string-left-trim ":" (subseq token colon)) token)))
            (loop while (and package (plusp (length name)))
                  do (multiple-value-bind (symbol status) (find-symbol name package)
                       (when (or status symbol) (return-from printed-function-symbol symbol)))
                     (let ((dash (position #\- name :from-end t))
                           (emf (search "-<EMF" name)))
                       (cond ((and dash (< (1+ dash) (length name))
                                   (every #'digit-char-p (subseq name (1+ dash))))
                              (setf name (subseq name 0 dash)))
                             (emf (setf name (subseq name 0 emf)))
                             (t (return nil))))))))))

  (defun bounded-output (limit function)
    "What FUNCTION writes to the stream it is given, cut at LIMIT
characters: CLISP's own string stream, into a string that cannot grow, so
writing past its end is an error that ends the printing. (The capture
streams stop themselves too, but as Gray streams they cost CLISP
microseconds a character: describing each frame of a deep stack through
one took seconds, on every entry into the debugger.)"
    (let ((buffer (make-array limit :element-type 'character :fill-pointer 0)))
      (ignore-errors (with-output-to-string (s buffer) (funcall function s)))
      (coerce buffer 'simple-string)))

  (defun frame-description (frame &optional (package *package*) (limit 4000))
    "FRAME's description as CLISP prints it, read with *PACKAGE* PACKAGE.
It shows the frame's environment, so it is printed with long lists and
deep nesting cut, at most LIMIT characters (a circular list in a local
variable would print forever), and, when more than its first line is
read (LIMIT over 1000), with labels for shared structure: finding that
walks every object printed first, most of the cost of typing each frame
of a stack (CLISP's debugger does that on every entry)."
    (bounded-output limit
                    (lambda (s)
                      (let ((*package* package) (*print-circle* (> limit 1000))
                            (*print-length* 20)
                            (*print-level* 5) (*print-pretty* nil) (*print-readably* nil))
                        (sys::describe-frame s frame)))))

  (defun compiled-frame-p (frame)
    "Whether FRAME is a compiled function's (CLISP keeps no variable names
there, and can neither return from nor restart it)."
    (let* ((text (frame-description frame *package* 1000))
           (line (subseq text 0 (or (position #\Newline text) (length text)))))
      (and (search "#<COMPILED-FUNCTION" line)
           (not (search "APPLY frame" line))
           (not (search "EVAL frame" line)))))

  (defun frame-locals-note (frame locals)
    (when (and (null locals) (compiled-frame-p frame))
      "none: CLISP keeps no variables in compiled code (compile-file, ASDF). To see them, load the function's source instead (evaluate its DEFUN, or LOAD its .lisp file) and run it again"))

  (defun frame-operation-problem (operation index frame)
    (when (compiled-frame-p frame)
      (format nil "CLISP cannot ~A frame ~D: it is compiled code, and CLISP can ~A only a frame of interpreted code (a function whose DEFUN was evaluated, or LOADed from source). ~A"
              (if (eq operation :return) "return from" "restart")
              index
              (if (eq operation :return) "return from" "restart")
              (frame-action-advice operation))))

  (defun frame-action-advice (operation)
    (ecase operation
      (:return "Choose one of the listed restarts instead, or load the function's source (evaluate its DEFUN) and run it again.")
      (:restart "Fix the function, then abort (debugger-restart with action abort) and call it again with evaluate-lisp.")))

  (defun call-entering-debugger (thunk)
    "The image runs with -on-error abort (so that an error in a batch
start exits), which puts a global handler behind every other: in a
debugger level, an error the code does not handle invoked the innermost
ABORT restart, showing the level again, instead of entering a nested
level. This handler enters it first."
    (handler-bind ((serious-condition
                     (lambda (c)
                       (unless (interrupt-condition-p c)
                         (invoke-debugger c)))))
      (funcall thunk)))

  ;; Swank's CLISP backend describes every frame of the stack (to skip
  ;; the boring ones) each time a backtrace is taken, printing without
  ;; bounds: a frame whose environment holds a circular list printed
  ;; forever, or until CLISP's stack overflowed (SIGSEGV). Its one printing
  ;; function is given the bounded description.
  (let ((to-string (find-symbol "FRAME-TO-STRING" "SWANK/CLISP")))
    (when (and to-string (fboundp to-string))
      (setf (fdefinition to-string) (lambda (frame) (frame-description frame)))))

  (defvar *frame-prefixes* '()
    "swank/clisp's *FRAME-PREFIXES* as (AFTER-NUMBER-P LITERAL TYPE): its
regular expressions are literal prefixes, after \"[N]\" for some.")

  (let ((prefixes (find-symbol "*FRAME-PREFIXES*" "SWANK/CLISP"))
        (numbered "\\[[0-9]\\+\\]"))
    (when (and prefixes (boundp prefixes))
      (setf *frame-prefixes*
            (loop for (pattern type) in (symbol-value prefixes)
                  collect (if (eql 0 (search numbered pattern))
                              (list t (subseq pattern (length numbered)) type)
                              (list nil pattern type))))))

  (defun frame-string-type (string)
    "The frame type swank/clisp's *FRAME-PREFIXES* give a frame
description STRING, matched as its regular expressions match, without
compiling one per pattern and frame: that took a quarter of a millisecond
a frame, and the debugger types each frame of the stack (thousands) on
every entry."
    (let ((after-number
            (and (plusp (length string))
                 (char= (char string 0) #\[)
                 (let ((close (position #\] string :end (min (length string) 12))))
                   (and close (> close 1)
                        (every #'digit-char-p (subseq string 1 close))
                        (1+ close))))))
      (loop for (numbered literal type) in *frame-prefixes*
            for start = (if numbered after-number 0)
            when (and start
                      (<= (+ start (length literal)) (length string))
                      (string= literal string :start2 start
                                              :end2 (+ start (length literal))))
              return type)))

  ;; Swank's CLISP backend types a frame by matching its description
  ;; against regular expressions, compiled anew for each pattern and frame
  ;; (FRAME-STRING-TYPE above replaces that), and describes the whole frame
  ;; to read its first words: the first 200 characters are enough.
  (let ((string-type (find-symbol "FRAME-STRING-TYPE" "SWANK/CLISP"))
        (frame-type (find-symbol "FRAME-TYPE" "SWANK/CLISP")))
    (when (and string-type (fboundp string-type) *frame-prefixes*)
      (setf (fdefinition string-type) #'frame-string-type)
      (when (and frame-type (fboundp frame-type))
        (setf (fdefinition frame-type)
              (lambda (frame)
                (frame-string-type (frame-description frame *package* 200)))))))

  ;; Swank's CLISP backend also wraps the compiler's C-ERROR to report the
  ;; error, formatting its arguments on the guess that the first of three
  ;; is a form: CLISP passes the form, the control string and any number of
  ;; arguments, so "Illegal syntax in ~A: ~S" became a FORMAT error about
  ;; the form, reported instead of the compiler's error. CLISP signals
  ;; that error itself (as a condition Swank's hooks note with its
  ;; location), so the wrapper only calls the compiler's own.
  (let ((c-error (find-symbol "C-ERROR" "SWANK/CLISP"))
        (original (find-symbol "*ORIG-C-ERROR*" "SWANK/CLISP")))
    (when (and c-error original (fboundp c-error) (boundp original))
      (setf (fdefinition c-error)
            (lambda (&rest args) (apply (symbol-value original) args)))))

  (defun frame-function-name (frame)
    "CLISP frames have no function objects Swank exposes: the name is read
from the frame's printed description (\"APPLY frame for call (FOO 1)\",
\"EVAL frame for form (FOO 1)\", #<COMPILED-FUNCTION FOO>), or NIL."
    (ignore-errors
     (let* ((text (frame-description frame (find-package "KEYWORD") 1000))
            (open (position #\( text)))
       (or (and (not (search "EVAL frame for " text))
                (not (search "APPLY frame for " text))
                (printed-function-symbol text))
           ;; Frames that are no call (unwind-protect, handler, catch and
           ;; binding frames) and anonymous compiled functions
           ;; (#<COMPILED-FUNCTION #:|...|>): machinery, as on SBCL, where
           ;; backtraces show no such frames.
           (and (or (search "#<COMPILED-FUNCTION #:" text)
                    (not (or (search "EVAL frame for " text)
                             (search "APPLY frame for " text)
                             (search "FUNCTION " text))))
                '(lambda () :in clisp-machinery-frame))
           (when open
             (let ((*read-eval* nil))
               (let ((form (read-from-string text nil nil :start open)))
                 (and (consp form) (symbolp (first form)) (first form)))))))))

  (defun implementation-internal-package-p (package)
    (member (package-name package)
            '("SYSTEM" "EXT" "CLOS" "CUSTOM" "GRAY" "FFI" "SOCKET" "CHARSET"
              "I18N" "POSIX" "SCREEN" "REGEXP")
            :test #'string=))

  (defun stack-exhaustion-p (condition)
    (or (typep condition 'storage-condition)
        (search "stack overflow" (print-capped condition 2000))))

  (defun call-with-top-frames (count function)
    "Swank's CLISP backend describes every element of the stack, down to
its bottom, before it shows one frame: 0.2 s alone and seconds under
load, spent in a timeout's interrupt before the evaluation stops. Here
the frames FUNCTION sees are the COUNT (and a few for this machinery)
found walking up from the caller as Swank walks, down to the frame where
user code was entered."
    (let ((boring (find-symbol "BORING-FRAME-P" "SWANK/CLISP"))
          (frames (find-symbol "*SLDB-BACKTRACE*" "SWANK/CLISP")))
      (if (not (and boring frames (fboundp boring)))
          (swank/backend:call-with-debugging-environment function)
          (let ((top '())
                (n 0))
            ;; Backtraces end where user code was entered (USER-BACKTRACE
            ;; cuts there): the frames below are Swank's, whose large
            ;; environments cost the most to describe.
            (do ((last nil frame)
                 (frame (sys::the-frame) (sys::frame-up 1 frame 1)))
                ((or (eq frame last) (>= n (+ count 10))))
              (unless (funcall boring frame)
                (push frame top)
                (incf n)
                (when (sentinel-frame-p (frame-function-name frame))
                  (return))))
            (progv (list frames) (list (nreverse top))
              (funcall function))))))

  (defun interrupt-condition-p (condition)
    "SIGINT (the server's timeout or cancellation) breaks into CLISP with
this condition."
    (typep condition 'system::interrupt-condition))

  (defun macroexpand-all-form (form)
    "CLISP's EXT:EXPAND-FORM (what swank/clisp uses) leaves macros such as
WHEN that its compiler handles itself unexpanded: expand the form itself
first, then the rest."
    (ext:expand-form (macroexpand form)))

  (defun fasl-source (fasl)
    "The source file ASDF compiled into FASL (CLISP records where a
definition was loaded from, and ASDF puts fasls away from their sources)."
    (let ((target (ignore-errors (truename fasl))))
      ;; lisp-compile-file's fasls mirror their sources under FASL-ROOT.
      (let* ((root (ignore-errors (namestring (truename (fasl-root)))))
             (name (and target (namestring target))))
        (when (and root name (> (length name) (length root))
                   (string= root name :end2 (length root)))
          (let ((source (probe-file
                         (make-pathname :type "lisp"
                                        :defaults (concatenate 'string "/"
                                                               (subseq name (length root)))))))
            (when source
              (return-from fasl-source source)))))
      (when target
        (dolist (name (asdf:already-loaded-systems))
          (let ((system (asdf:find-system name nil)))
            (labels ((walk (c)
                       (typecase c
                         (asdf:parent-component
                          (mapc #'walk (asdf:component-children c)))
                         (asdf:cl-source-file
                          (let ((out (first (ignore-errors
                                             (asdf:output-files 'asdf:compile-op c)))))
                            (when (and out (equal (ignore-errors (truename out)) target))
                              (return-from fasl-source (asdf:component-pathname c))))))))
              (when system (walk system))))))))

  (defun class-form-offset (path symbol)
    "Where the DEFCLASS, DEFSTRUCT or DEFINE-CONDITION of SYMBOL starts in
the file PATH (a character offset), found by its text, or NIL."
    (let ((text (ignore-errors (cached-file-text (namestring path)))))
      (and text
           (cdr (find (symbol-name symbol)
                      (defining-forms text '("defclass" "defstruct" "define-condition"))
                      :key #'car :test #'string-equal)))))

  (defun method-form-offset (path symbol spec)
    "Where the DEFMETHOD of SYMBOL that SPEC, CLISP's (DEFMETHOD QUALIFIERS
SPECIALIZER...), records starts in the file PATH, found by its text: CLISP
records no usable line for a compiled method (NIL, or a line of the
expansion past the file's end)."
    (let ((text (ignore-errors (cached-file-text (namestring path)))))
      (and text
           (named-definition-offset
            text (symbol-name symbol)
            :operator "defmethod"
            :specializers (remove t (remove-if-not #'symbolp (cddr spec)))))))

  (defun backend-find-definitions (symbol)
    "As swank/clisp, but a definition loaded from a fasl whose source is not
beside it (ASDF's output translations) points at the source ASDF compiled,
and a class or structure (recorded as (SETF FIND-CLASS), at a line of the
macro's expansion) or a method at its defining form."
    (mapcar (lambda (fspec)
              (let* ((path (and (consp fspec) (second fspec)))
                     (fspec (if (and path (pathnamep path)
                                     (member (pathname-type path) custom:*compiled-file-types*
                                             :test #'equal))
                                (let ((source (fasl-source path)))
                                  (if source (list* (first fspec) source (cddr fspec)) fspec))
                                fspec))
                     (entry (swank/clisp::fspec-location symbol fspec))
                     (offset (and (consp fspec) (pathnamep (second fspec))
                                  (cond ((equal (first fspec) '(setf find-class))
                                         (class-form-offset (second fspec) symbol))
                                        ((and (consp (first fspec))
                                              (eq (first (first fspec)) 'defmethod))
                                         (method-form-offset (second fspec) symbol
                                                             (first fspec)))))))
                (if offset
                    (list (first entry)
                          (list :location
                                (list :file (namestring (truename (second fspec))))
                                (list :position (1+ offset))
                                nil))
                    entry)))
            (documentation symbol 'sys::file)))

  (defun frame-view (frame)
    "(values NAME TEXT) of a CLISP frame, read from its description: an
APPLY frame is a call of an interpreted function (TEXT \"(F '1)\"), a
compiled function's frame is named by it; every other frame (EVAL forms,
bindings, blocks, catch tags) is :SKIP."
    (flet ((first-line (package)
             ;; Described with *PACKAGE* as given: the names a frame shows
             ;; depend on it (a build loads with the system's package current).
             ;; Its first line is all that is read (and cut at 400).
             (let ((all (frame-description frame package 1000)))
               (subseq all 0 (or (position #\Newline all) (length all))))))
      (let ((line (first-line *package*))
            ;; Every symbol with its package, to find the function by name.
            (qualified (first-line (find-package "KEYWORD"))))
      (flet ((after (marker &optional (line line))
               (let ((p (search marker line)))
                 (and p (subseq line (+ p (length marker))))))
             (head-name (call)
               (symbol-from-text
                (string-trim "(" (subseq call 0 (or (position-if (lambda (c) (member c '(#\Space #\))))
                                                                 call)
                                                    (length call)))))))
        (let ((call (after "APPLY frame for call "))
              (compiled (or (after "#<COMPILED-FUNCTION " qualified)
                            (after "#<SYSTEM-FUNCTION " qualified))))
          (cond (call
                 (let ((name (let ((q (after "APPLY frame for call " qualified)))
                               (and q (head-name q)))))
                   (values (or name :skip) (truncate-string call 400))))
                (compiled
                 (let* ((end (or (position #\> compiled) (length compiled)))
                        (name (symbol-from-text (subseq compiled 0 end))))
                   (values (or name :skip)
                           (and name (format nil "(~A ...)" (type-name-of-symbol name))))))
                (t (values :skip nil))))))))

  (defun frame-env-index (index)
    "An interpreted function's APPLY frame has no variables: the innermost
EVAL frame of its body (below it, before the next call) holds its lexical
environment."
    (let ((frames (swank/backend:compute-backtrace 0 (1+ index)))
          (found index))
      (loop for j from (1- index) downto 0
            for text = (frame-description (nth j frames) *package* 1000)
            until (search "APPLY frame" text)
            when (and (search "EVAL frame" text)
                      (ignore-errors (swank/backend:frame-locals j)))
              do (setf found j))
      found))

  (defun read-error-of-compile-p (condition)
    "CLISP's syntax errors (e.g. (LET ((1 X)))) are program errors."
    (typep condition '(or reader-error package-error program-error)))

  (defun special-variable-p (symbol)
    (ext:special-variable-p symbol))

  (defun compiling-form-position ()
    "As on SBCL, from CLISP's COMPILE-FILE: the line where reading the
current top-level form began (SYS::*COMPILE-FILE-LINENO1*), moved past the
blank lines and comments before the form."
    (ignore-errors
     (let ((line sys::*compile-file-lineno1*)
           (path (and *compile-file-truename* (namestring *compile-file-truename*))))
       (when (and path (integerp line) (plusp line))
         (let ((text (cached-file-text path))
               (start 0))
           (when text
             (loop repeat (1- line)
                   while start
                   do (setf start (let ((nl (position #\Newline text :start start)))
                                    (and nl (1+ nl)))))
             (when start
               (values path (definition-form-start text start t)))))))))

  (defun xref-available-p ()
    "swank/clisp answers who-calls from the portable xref database, which
only files compiled through XREF:XREF-FILE fill: nothing the tools or ASDF
compile, so no cross-references."
    nil)

  (defun ignorable-warning-p (condition)
    "CLISP warns when a function is redefined (clos:defun with a new
definition), which is what the agent asked for, and when a library adds a
method to a generic function already called (ASDF's PERFORM, as every test
system does): noise. Called for every warning, so the format control is
searched where there is one (printing through a capped stream costs CLISP
microseconds per character: thousands of long warnings took minutes), and
only its start."
    (let ((text (or (and (typep condition 'simple-condition)
                         (let ((control (simple-condition-format-control condition)))
                           (and (stringp control) control)))
                    ;; Capped printing: the warning's arguments may be
                    ;; circular; the words looked for come first.
                    (print-capped condition 1000))))
      ;; The words come early; CLISP's SEARCH is slow on long strings.
      (let ((end (min (length text) 600)))
        (and (or (search "redefin" text :end2 end) (search "DEFUN/DEFMACRO" text :end2 end)
                 (search "to an already called generic function" text :end2 end))
             t)))))
