;;;; test-locations.lisp --- where a failed check is written: the test's
;;;; source form found with the Lisp reader, and in it the check whose
;;;; expression failed.

(in-package #:cl-mcp-server)

(defparameter *test-definers* '("test" "def-test" "deftest" "define-test")
  "Operators whose first argument names a test (FiveAM, Fiasco/RT/Rove/
lisp-unit2, Parachute).")

(defun position-recording-readtable (positions)
  "A copy of the standard readtable whose open parenthesis records, in the
EQ hash table POSITIONS, the character offset where each list it reads
starts."
  (let* ((readtable (copy-readtable nil))
         (open (get-macro-character #\( readtable)))
    (set-macro-character
     #\(
     (lambda (stream char)
       (let* ((start (1- (file-position stream)))
              (list (funcall open stream char)))
         (when (consp list)
           (setf (gethash list positions) start))
         list))
     nil readtable)
    readtable))

(defun in-package-form-p (form)
  (and (consp form) (symbolp (car form))
       (string= (symbol-name (car form)) "IN-PACKAGE")
       (consp (cdr form))))

(defun read-source-forms (text)
  "The top-level forms of TEXT (a file's text), read with the Lisp reader
as the compiler reads them (an IN-PACKAGE form switches the package for
the forms after it; #+/#- by this image's features; no #.), as (values
FORMS POSITIONS): FORMS the lists read, in file order; POSITIONS an EQ hash
table of every list read (nested ones too) to the offset of its
parenthesis. Comments and strings are never taken for code. A form that
does not read (a package this image lacks) is skipped: reading resumes at
the next line that opens with a parenthesis."
  (let* ((positions (make-hash-table :test 'eq))
         (*readtable* (position-recording-readtable positions))
         (*package* (find-package "CL-USER"))
         (*read-eval* nil)
         (eof '#:eof)
         (forms '())
         (resume (format nil "~%(")))
    (with-input-from-string (in text)
      (loop
        (let* ((before (file-position in))
               (form (handler-case (read in nil eof)
                       (error ()
                         (let ((next (search resume text :start2 (1+ before))))
                           (unless next (return))
                           (file-position in (1+ next))
                           nil)))))
          (cond ((eq form eof) (return))
                ((consp form)
                 (push form forms)
                 (when (in-package-form-p form)
                   (let ((package (ignore-errors (find-package (second form)))))
                     (when package (setf *package* package)))))))))
    (values (nreverse forms) positions)))

(defun same-form-p (a b)
  "Whether A and B read as the same form: conses alike, symbols, numbers
and characters EQL, strings STRING=, anything else EQUALP (the reader's
backquote structures)."
  (cond ((and (consp a) (consp b))
         (and (same-form-p (car a) (car b)) (same-form-p (cdr a) (cdr b))))
        ((or (consp a) (consp b)) nil)
        ((and (stringp a) (stringp b)) (string= a b))
        ((or (symbolp a) (numberp a) (characterp a)) (eql a b))
        (t (equalp a b))))

(defun definer-name (form)
  "The name FORM defines when its operator is one of *TEST-DEFINERS*
(FiveAM's `(test NAME ...)` and `(test (NAME &key ...) ...)`), else NIL."
  (when (and (symbolp (car form))
             (member (symbol-name (car form)) *test-definers* :test #'string-equal)
             (consp (cdr form)))
    (let ((name (if (consp (second form)) (car (second form)) (second form))))
      (and (symbolp name) name))))

(defun test-making-macro-call-p (form name)
  "Whether FORM is a call of a user's macro (not Common Lisp's, not
FiveAM's) that takes NAME as an argument and whose expansion holds NAME:
the call that defined the test NAME, e.g. `(def-add-test NAME 2 2 5)`."
  (let ((operator (car form)))
    (and (symbolp operator) operator
         (not (member (symbol-package operator)
                      (list (find-package "COMMON-LISP") (find-package "IT.BESE.FIVEAM"))))
         (ignore-errors (macro-function operator))
         (member-if (lambda (arg) (or (eq arg name) (and (consp arg) (eq (car arg) name))))
                    (cdr form))
         (let ((expansion (ignore-errors (macroexpand-1 form))))
           (and expansion (not (eq expansion form)) (tree-holds-p expansion name))))))

(defun tree-holds-p (tree atom &optional (depth 0))
  (cond ((eq tree atom) t)
        ((or (atom tree) (> depth 200)) nil)
        (t (or (tree-holds-p (car tree) atom (1+ depth))
               (tree-holds-p (cdr tree) atom (1+ depth))))))

(defun check-starts (expr form positions)
  "The offsets, in source order, of the lists within FORM that hold a form
like EXPR as an element: the checks (`(is EXPR)`) whose expression is EXPR."
  (let ((starts '()) (seen (make-hash-table :test 'eq)))
    (labels ((walk (x depth)
               (when (and (consp x) (< depth 200) (not (gethash x seen)))
                 (setf (gethash x seen) t)
                 (let ((start (gethash x positions)))
                   (when (and start
                              (loop for tail on x
                                    while (consp tail)
                                    thereis (same-form-p (car tail) expr)))
                     (push start starts)))
                 (loop for tail on x
                       while (consp tail)
                       do (walk (car tail) (1+ depth))))))
      (walk form 0))
    (nreverse starts)))

(defun test-source-locator (files)
  "A function of (NAME EXPR NTH) giving where the test NAME (a symbol, or
a string when only the name is known) failed: (:path P :line N :column N :at A), A \"check\" for the
NTH (0-based) check in the test's source whose expression is like EXPR,
\"test\" for the test's own form when no check matches (an assertion made
by a function the test calls), \"macro-call\" for the top-level form of
a user's macro that defined the test; NIL when not found. FILES are read
once, on the first call."
  (let ((read-files nil))
    (lambda (name expr nth)
      (unless read-files
        (setf read-files
              (loop for path in files
                    for text = (ignore-errors (cached-file-text path))
                    when text
                      collect (multiple-value-bind (forms positions)
                                  (read-source-forms text)
                                (list path text forms positions)))))
      (labels ((find-form (predicate)
                 ;; The first top-level form PREDICATE accepts: (FILE . FORM).
                 (dolist (file read-files)
                   (dolist (form (third file))
                     (when (funcall predicate form)
                       (return-from find-form (cons file form))))))
               (locate (hit fallback)
                 (destructuring-bind ((path text forms positions) . form) hit
                   (declare (ignore forms))
                   (let* ((starts (and expr (check-starts expr form positions)))
                          (start (if starts
                                     (nth (min nth (1- (length starts))) starts)
                                     (gethash form positions))))
                     (multiple-value-bind (line column) (offset-line-column text start)
                       (list :path path :line line :column column
                             :at (if starts "check" fallback)))))))
        (let ((hit (or (and (symbolp name)
                            (find-form (lambda (form) (eq (definer-name form) name))))
                       ;; Read in another package than the one it was
                       ;; compiled in, or known by its name only: the
                       ;; same name.
                       (find-form (lambda (form)
                                    (let ((defined (definer-name form)))
                                      (and defined
                                           (string-equal (symbol-name defined)
                                                         (string name)))))))))
          (cond (hit (locate hit "test"))
                ((symbolp name)
                 (let ((call (find-form (lambda (form) (test-making-macro-call-p form name)))))
                   (and call (locate call "macro-call"))))))))))
