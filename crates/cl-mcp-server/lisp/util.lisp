;;;; util.lisp --- small portable helpers shared by the other files.

(in-package #:cl-mcp-server)

(defun prin1-to-string* (object)
  "PRIN1-TO-STRING that never signals: an object whose printing fails is
shown as #<error printing ...>."
  (handler-case (let ((*print-readably* nil)) (prin1-to-string object))
    (error (e)
      (format nil "#<error printing object of type ~A: ~A>"
              (ignore-errors (type-of object))
              (ignore-errors (princ-to-string e))))))

(defun princ-to-string* (object)
  "PRINC-TO-STRING that never signals."
  (handler-case (let ((*print-readably* nil)) (princ-to-string object))
    (error (e)
      (format nil "#<error printing object: ~A>"
              (ignore-errors (princ-to-string e))))))

(defun truncate-string (string limit)
  "STRING cut to LIMIT characters with the same marker the server uses."
  (if (and limit (> (length string) limit))
      (format nil "~A~%[truncated ~D characters]"
              (subseq string 0 limit) (- (length string) limit))
      string))

(defun one-line (text)
  "TEXT with every run of whitespace made one space (FiveAM's reasons are
laid out over many lines)."
  (let ((out (make-string-output-stream)) (space nil))
    (loop for c across (string-trim '(#\Space #\Tab #\Newline #\Return) text)
          do (if (member c '(#\Space #\Tab #\Newline #\Return))
                 (setf space t)
                 (progn (when space (write-char #\Space out) (setf space nil))
                        (write-char c out))))
    (get-output-stream-string out)))

(defun qualified-name (symbol)
  "SYMBOL as PKG:NAME (one colon when external, two when internal), with
the package's name, so it reads back the same in any package."
  (let ((package (symbol-package symbol)))
    (cond ((null package) (format nil "#:~A" (symbol-name symbol)))
          ((eq package (find-package "KEYWORD"))
           (format nil ":~A" (symbol-name symbol)))
          (t (let ((*package* (find-package "KEYWORD")))
               (prin1-to-string* symbol))))))

(defun type-name (object)
  "The type of a condition/object as a string readable from CL-USER."
  (let ((*package* (find-package "COMMON-LISP-USER")))
    (prin1-to-string* (type-of object))))

(defun milliseconds-since (start)
  (round (* 1000 (- (get-internal-real-time) start))
         internal-time-units-per-second))

;;; Files: positions to lines and columns.
;;;
;;; Swank reports source positions as character positions in the file (1-based
;;; :position in its locations). The server shows 1-based lines and 1-based
;;; columns counted in characters, so the conversion happens here, where the
;;; file is read with the same external format the compiler used.

(defun read-file-text (path)
  "The text of PATH, or NIL when it cannot be read."
  (ignore-errors
   (with-open-file (in path :direction :input)
     (let* ((out (make-string-output-stream))
            (buffer (make-string 65536)))
       (loop for n = (read-sequence buffer in)
             while (plusp n)
             do (write-string buffer out :end n))
       (get-output-stream-string out)))))

(defvar *file-text-cache* nil
  "Within one request: an EQUAL hash table of path -> text (or :none).")

(defun cached-file-text (path)
  (if *file-text-cache*
      (let ((hit (gethash path *file-text-cache*)))
        (cond ((eq hit :none) nil)
              (hit hit)
              (t (let ((text (read-file-text path)))
                   (setf (gethash path *file-text-cache*) (or text :none))
                   text))))
      (read-file-text path)))

(defmacro with-file-cache (() &body body)
  `(let ((*file-text-cache* (make-hash-table :test 'equal)))
     ,@body))

(defun offset-line-column (text offset)
  "1-based line and column of the 0-based character OFFSET in TEXT, and the
text of that line (without its newline)."
  (let* ((offset (max 0 (min offset (length text))))
         (line 1)
         (line-start 0))
    (loop for i from 0 below offset
          when (char= (char text i) #\Newline)
            do (incf line) (setf line-start (1+ i)))
    (let ((line-end (or (position #\Newline text :start line-start)
                        (length text))))
      (values line (1+ (- offset line-start))
              (subseq text line-start line-end)))))

(defun token-end (text start)
  (or (position-if (lambda (c) (member c '(#\Space #\Tab #\Newline #\Return #\( #\) #\")))
                   text :start start)
      (length text)))

(defun unqualified (token)
  (let ((colon (position #\: token :from-end t)))
    (if colon (subseq token (1+ colon)) token)))

(defun form-operator (text open)
  "The operator of the form whose parenthesis is at OPEN in TEXT, without
package prefix, and where its token ends."
  (let ((end (token-end text (1+ open))))
    (values (unqualified (subseq text (1+ open) end)) end)))

(defun code-open-parens (text)
  "The offsets of the open parentheses of TEXT that are code: not in a
; or #| |# comment, a string, a |quoted| symbol name, or a #\\( character."
  (let ((n (length text)) (i 0) (opens '()))
    (flet ((skip-quoted (close)
             ;; From after an opening quote to after its CLOSE, over backslashes.
             (loop while (and (< i n) (char/= (char text i) close))
                   do (incf i (if (char= (char text i) #\\) 2 1)))
             (incf i)))
      (loop while (< i n)
            do (let ((c (char text i)))
                 (cond ((char= c #\;)
                        (setf i (or (position #\Newline text :start i) n)))
                       ((char= c #\") (incf i) (skip-quoted #\"))
                       ((char= c #\|) (incf i) (skip-quoted #\|))
                       ((char= c #\\) (incf i 2))
                       ((and (char= c #\#) (< (1+ i) n) (char= (char text (1+ i)) #\\))
                        (incf i 3))
                       ((and (char= c #\#) (< (1+ i) n) (char= (char text (1+ i)) #\|))
                        ;; Block comments nest.
                        (let ((depth 1))
                          (incf i 2)
                          (loop while (and (< i n) (plusp depth))
                                do (cond ((and (< (1+ i) n) (char= (char text i) #\|)
                                               (char= (char text (1+ i)) #\#))
                                          (decf depth) (incf i 2))
                                         ((and (< (1+ i) n) (char= (char text i) #\#)
                                               (char= (char text (1+ i)) #\|))
                                          (incf depth) (incf i 2))
                                         (t (incf i))))))
                       ((char= c #\() (push i opens) (incf i))
                       (t (incf i))))))
    (nreverse opens)))

(defun defining-forms (text definers)
  "The forms of TEXT (a file's text) that open a line (after indentation)
with an operator in DEFINERS (names, any case, any package prefix; :DEF,
any operator whose name starts with DEF), found
by their text (outside comments and strings), as ((NAME . OFFSET) ...) in
file order: NAME the token after the operator, without package prefix,
string quote or the parenthesis of (DEFSTRUCT (NAME ...)); OFFSET the
form's own parenthesis."
  (let ((found '()))
    (loop for open in (code-open-parens text)
          do (let ((line-start (let ((nl (position #\Newline text :end open :from-end t)))
                                 (if nl (1+ nl) 0))))
               (when (every (lambda (c) (member c '(#\Space #\Tab)))
                            (subseq text line-start open))
                 (multiple-value-bind (op op-end) (form-operator text open)
                   (let ((name-start
                           (and (if (eq definers :def)
                                    (and (> (length op) 3)
                                         (string-equal op "def" :end1 3))
                                    (member op definers :test #'string-equal))
                                (position-if-not
                                 (lambda (c) (member c '(#\Space #\Tab #\Newline #\Return)))
                                 text :start op-end))))
                     (when name-start
                       (when (member (char text name-start) '(#\( #\"))
                         (incf name-start))
                       (let ((name (unqualified (subseq text name-start
                                                        (token-end text name-start)))))
                         (when (plusp (length name))
                           (push (cons name open) found)))))))))
    (nreverse found)))

(defun named-definition-offset (text name &key operator specializers)
  "Where TEXT defines NAME, for a Swank location that gives a definition by
name, as ABCL's do ((:FUNCTION-NAME NAME), (:METHOD NAME SPECIALIZERS)),
found the way Emacs finds them: a form opening a line with a DEF...
operator and NAME. A form with OPERATOR (the definition's own, when known)
is preferred; with SPECIALIZERS, a form whose next line or so names them in
order (a DEFMETHOD's lambda list). The offset, or NIL."
  (let* ((forms (remove-if-not (lambda (f) (string-equal (car f) name))
                               (defining-forms text :def)))
         (by-operator (if operator
                          (or (remove-if-not
                               (lambda (f) (string-equal (form-operator text (cdr f)) operator))
                               forms)
                              forms)
                          forms)))
    (flet ((names-specializers-p (offset)
             (let ((header (string-downcase
                            (subseq text offset (min (length text) (+ offset 400)))))
                   (at 0))
               (every (lambda (s)
                        (let ((found (search (string-downcase (unqualified (princ-to-string s)))
                                             header :start2 at)))
                          (when found (setf at (1+ found)))))
                      specializers))))
      (cdr (or (and specializers
                    (find-if #'names-specializers-p by-operator :key #'cdr))
               (first by-operator))))))

(defun octet-offset-to-char-offset (path octets)
  "The character offset of the byte offset OCTETS in the (UTF-8) file PATH,
or OCTETS itself when the file cannot be read or decoded."
  (or (ignore-errors
       (with-open-file (in path :element-type '(unsigned-byte 8))
         (let* ((buffer (make-array octets :element-type '(unsigned-byte 8)))
                (n (read-sequence buffer in)))
           (length (swank/backend:utf8-to-string (subseq buffer 0 n))))))
      octets))

(defun definition-form-start (text offset &optional definition)
  "Where the form that a backend's OFFSET in TEXT stands for starts. SBCL
points at the form itself; ECL at the end of the form before it (skip the
blank lines and ; comments between). For a DEFINITION, CLISP's swank
backend points at its name inside a line that starts the form (go back to
the line's opening parenthesis)."
  (let ((n (length text)))
    (cond ((>= offset n) offset)
          ((or (member (char text offset) '(#\Space #\Tab #\Newline #\Return))
               (char= (char text offset) #\;))
           (let ((i offset))
             (loop while (< i n)
                   do (let ((c (char text i)))
                        (cond ((member c '(#\Space #\Tab #\Newline #\Return)) (incf i))
                              ((char= c #\;)
                               (setf i (or (position #\Newline text :start i) n)))
                              (t (return)))))
             (if (< i n) i offset)))
          ((or (char= (char text offset) #\() (not definition)) offset)
          (t (let ((line-start (let ((nl (position #\Newline text :end offset :from-end t)))
                                 (if nl (1+ nl) 0))))
               (if (char= (char text line-start) #\()
                   line-start
                   offset))))))

(defun location-plist (location &key octets dspec)
  "A Swank location as a plist: (:path P :offset O :line L :column C
:context LINE-TEXT :snippet S), or (:error MESSAGE) when Swank could not
locate it. OFFSET is 0-based characters; LINE and COLUMN are 1-based.
OCTETS means the location comes from definition data, whose positions
are byte offsets on some backends (DEFINITION-POSITIONS-IN-OCTETS-P).
DSPEC, the definition's (OPERATOR NAME ...), tells a location given by
name which form it is (NAMED-DEFINITION-OFFSET)."
  (cond
    ((and (consp location) (eq (first location) :error))
     (list :error (princ-to-string* (second location))))
    ((and (consp location) (eq (first location) :location))
     (let* ((buffer (second location))
            (position (third location))
            (hints (fourth location))
            (path (and (consp buffer) (eq (first buffer) :file) (second buffer)))
            (pos (and (consp position)
                      (case (first position)
                        (:position (second position))
                        (:offset (+ (or (second position) 0)
                                    (or (third position) 0)))
                        (t nil))))
            (offset (and pos (max 0 (1- pos))))
            (offset (if (and offset path octets (definition-positions-in-octets-p))
                        (octet-offset-to-char-offset path offset)
                        offset))
            (snippet (and (consp hints) (getf hints :snippet)))
            (result (list :path path)))
       ;; A definition's (:LINE L C) (CLISP's: L is where reading the form
       ;; began, C unreliable): the form's own position from L's start.
       (when (and path (not offset) octets (consp position) (eq (first position) :line)
                  (integerp (second position)))
         (let ((text (cached-file-text path)))
           (when text
             (let ((start 0))
               (loop repeat (1- (second position))
                     while start
                     do (setf start (let ((nl (position #\Newline text :start start)))
                                      (and nl (1+ nl)))))
               (when start
                 (setf offset start
                       position nil))))))
       ;; A definition given by name (ABCL's): found in the file's text.
       (when (and path (not offset) (consp position)
                  (member (first position) '(:function-name :method))
                  (stringp (second position)))
         (let ((text (cached-file-text path)))
           (when text
             (let ((found (named-definition-offset
                           text (second position)
                           :operator (and (consp dspec) (symbolp (first dspec))
                                          (symbol-name (first dspec)))
                           :specializers (and (eq (first position) :method)
                                              (listp (third position))
                                              (third position)))))
               (when found
                 (setf offset found
                       position nil))))))
       (when (and path offset)
         (let ((text (cached-file-text path)))
           (when text
             (setf offset (definition-form-start text offset octets)))
           (when text
             (multiple-value-bind (line column context)
                 (offset-line-column text offset)
               (setf result (append result
                                    (list :offset offset :line line
                                          :column column
                                          :context (truncate-string context 300))))))))
       (when (and (consp position) (eq (first position) :line))
         (setf result (append result (list :line (second position)
                                           :column (or (third position) 1)))))
       (when (and (consp buffer) (eq (first buffer) :source-form))
         (setf result (append result (list :source-form (second buffer)))))
       (when snippet
         (setf result (append result (list :snippet (truncate-string snippet 300)))))
       result))
    (t (list :error (format nil "Unknown location ~A" (prin1-to-string* location))))))

;;; Symbols the way a user names them.

(defun split-symbol-designator (string)
  "Split \"pkg:name\", \"pkg::name\", \":name\" or \"name\" into
(values package-part-or-nil name-part internal-p). Colons inside |...| or
after a backslash do not count."
  (let ((escaped nil) (in-bars nil) (colon nil) (colons 0))
    (loop for i from 0 below (length string)
          for c = (char string i)
          do (cond (escaped (setf escaped nil))
                   ((char= c #\\) (setf escaped t))
                   ((char= c #\|) (setf in-bars (not in-bars)))
                   ((and (char= c #\:) (not in-bars))
                    (unless colon (setf colon i))
                    (incf colons))))
    (if colon
        (values (subseq string 0 colon)
                (subseq string (+ colon (min colons 2)))
                (>= colons 2))
        (values nil string nil))))

(defun normalize-token (token)
  "The names a token may mean: as the reader would read it (escapes
honoured, case converted by the readtable), then as typed."
  (let ((read (ignore-errors
               (let ((*package* (find-package "KEYWORD"))
                     (*read-eval* nil))
                 (let ((s (read-from-string (concatenate 'string "#:" token))))
                   (and (symbolp s) (symbol-name s)))))))
    (remove-duplicates (remove nil (list read token (string-upcase token)))
                       :test #'string= :from-end t)))

(defun find-package* (name &optional (relative-to *package*))
  "A package by name or nickname in any case (package-local nicknames of
RELATIVE-TO honoured where the implementation has them)."
  (let ((*package* (or relative-to *package*)))
    (loop for candidate in (normalize-token name)
          thereis (find-package candidate))))

(defun resolve-package (designator)
  "A package from a user's designator (string, symbol, package or NIL).
Returns (values package error-message)."
  (cond ((null designator) (values nil nil))
        ((packagep designator) (values designator nil))
        (t (let* ((name (string designator))
                  (name (string-left-trim ":#" name))
                  (package (find-package* name)))
             (if package
                 (values package nil)
                 (values nil (format nil "No package named ~S exists in the image.~A" name (package-guess-clause name))))))))

(defun resolve-symbol (designator &key package)
  "Resolve DESIGNATOR (\"pkg:name\", \"pkg::name\", \"name\") the way a
user means it: a bare name is looked up in PACKAGE (default CL-USER), then
among every package's external symbols when unique. Any case works.
Returns (values symbol nil) or (values nil error-message)."
  (multiple-value-bind (default-package package-error)
      (resolve-package (or package "COMMON-LISP-USER"))
    (when package-error
      (return-from resolve-symbol (values nil package-error)))
    (multiple-value-bind (package-part name-part) (split-symbol-designator
                                                   (string-trim " 	" designator))
      (when (and package-part (string= package-part ""))
        (setf package-part "KEYWORD"))
      (let ((home (if package-part
                      (find-package* package-part default-package)
                      default-package)))
        (unless home
          (return-from resolve-symbol
            (values nil (format nil "No package named ~S exists in the image.~A" package-part (package-guess-clause package-part)))))
        (loop for name in (normalize-token name-part)
              do (multiple-value-bind (symbol status) (find-symbol name home)
                   (when status (return-from resolve-symbol (values symbol nil)))))
        (unless package-part
          ;; A bare name not visible in the package: an external symbol of
          ;; exactly one other package is what the user meant.
          (let ((found '()))
            (dolist (name (normalize-token name-part))
              (dolist (p (list-all-packages))
                (multiple-value-bind (symbol status) (find-symbol name p)
                  (when (eq status :external) (pushnew symbol found)))))
            (when (= (length found) 1)
              (return-from resolve-symbol (values (first found) nil)))
            (when (> (length found) 1)
              (return-from resolve-symbol
                (values nil (format nil "Symbol ~S is not accessible in ~A and is ambiguous: ~{~A~^, ~}. Qualify it as pkg:name."
                                    name-part (package-name home)
                                    (mapcar #'qualified-name found)))))))
        (values nil (format nil "Symbol ~S not found in package ~A.~A"
                            name-part (package-name home)
                            (symbol-guess-clause name-part home)))))))

;;; A request for a fresh Swank thread when no thread can be made.

(defun rex-on-fresh-thread (connection event)
  "Swank's *EVENT-HOOK*: serve (:EMACS-REX FORM PACKAGE T ID), a request
for a fresh worker thread, as Swank's DISPATCH-EVENT would, except that a
thread that cannot be made (the image at its process and thread limit:
\"Could not create new OS thread\") answers this request with an abort
that says so. Swank's own dispatch would signal the error in its control
thread, whose panic handler closes the connection, and the image with it.
Other events are left to Swank (NIL)."
  (when (and (consp event)
             (eq (first event) :emacs-rex)
             (eq (fourth event) t))
    (destructuring-bind (form package thread-id id) (rest event)
      (declare (ignore thread-id))
      (let ((thread (handler-case (swank::spawn-worker-thread connection)
                      (error (e)
                        (swank::encode-message
                         (list :return
                               (list :abort
                                     (format nil "the image could not start a thread for ~
                                                  this request (~A): it is at its limit of ~
                                                  processes and threads (--max-processes, or ~
                                                  the user's RLIMIT_NPROC); end threads or ~
                                                  programs it started, or use image-restart"
                                             (princ-to-string* e)))
                               id)
                         (swank::current-socket-io))
                        (return-from rex-on-fresh-thread t)))))
        (swank::add-active-thread connection thread)
        (swank::send-event thread (list :emacs-rex form package id))
        t))))

(when (typep (swank/backend:preferred-communication-style) '(member :spawn))
  (pushnew 'rex-on-fresh-thread swank::*event-hook*))
