;;;; Prints where SBCL's own reader finds the top-level forms of files.
;;;;
;;;; Used by cst_sbcl_differential.rs:
;;;;   sbcl --script sbcl-form-boundaries.lisp < list-of-paths
;;;;
;;;; Input: one path per line (UTF-8 files). Output, per file:
;;;;   FILE <path>
;;;;   <start> <end>          one line per top-level form, CHARACTER offsets
;;;;   L <start> <end>        one line per list read anywhere in that form
;;;;   OK                     or: ERROR <char-offset> <one-line message>
;;;;
;;;; Forms are read with *READ-SUPPRESS* bound to T, so packages, read-time
;;;; evaluation and unknown symbols do not matter: only the syntax does. Two
;;;; adjustments make SBCL's notion of "a form" match the CST's:
;;;; - #+/#- always read both the feature expression and the guarded form
;;;;   and return a value, so a reader conditional is one form whatever the
;;;;   features (SBCL would otherwise skip a false one silently and carry on
;;;;   with the next form);
;;;; - the start of a form is found by skipping whitespace, ; comments and
;;;;   #| |# comments by hand, because READ skips them silently.
;;;; Forms are read with READ-PRESERVING-WHITESPACE so that a form's end is
;;;; its last character, not the whitespace after it. Lists are recorded by
;;;; wrapping the standard `(` reader macro (vectors' `#(` reads its elements
;;;; without it, so only the lists inside vectors show up).
;;;; The file is read into a string first, so FILE-POSITION counts characters
;;;; exactly whatever the external format.

(defvar *list-spans* '()
  "(start . end) of every list read since the last top-level form.")

(defvar *readtable-for-boundaries*
  (let ((rt (copy-readtable nil))
        (read-list (get-macro-character #\( nil)))
    (set-macro-character
     #\( (lambda (stream char)
           (let ((start (1- (file-position stream))))
             (multiple-value-prog1 (funcall read-list stream char)
               (push (cons start (file-position stream)) *list-spans*))))
     nil rt)
    (flet ((both (stream sub-char numarg)
             (declare (ignore sub-char numarg))
             (read stream t nil t)
             (read stream t nil t)
             :reader-conditional))
      (set-dispatch-macro-character #\# #\+ #'both rt)
      (set-dispatch-macro-character #\# #\- #'both rt))
    rt))

(defun slurp (path)
  (with-open-file (in path :external-format :utf-8)
    (let* ((buffer (make-string (file-length in)))
           (n (read-sequence buffer in)))
      (subseq buffer 0 n))))

(defun skip-trivia (stream)
  "Moves STREAM past whitespace and comments; returns the position of the
next form's first character, or NIL at end of input."
  (loop
    (let ((c (peek-char t stream nil nil)))
      (cond ((null c) (return nil))
            ((char= c #\;) (read-line stream nil nil))
            ((char= c #\#)
             (let ((pos (file-position stream)))
               (read-char stream)
               (if (eql (read-char stream nil nil) #\|)
                   (funcall (get-dispatch-macro-character #\# #\|) stream #\| nil)
                   (progn (file-position stream pos) (return pos)))))
            (t (return (file-position stream)))))))

(defun one-line (string)
  (substitute-if #\Space (lambda (c) (member c '(#\Newline #\Return))) string))

(defun report-file (path)
  (format t "FILE ~a~%" path)
  (let ((stream (make-string-input-stream (slurp path)))
        (*readtable* *readtable-for-boundaries*)
        (*read-suppress* t)
        (start 0))
    (handler-case
        (loop
          (setf start (skip-trivia stream))
          (unless start (return))
          (setf *list-spans* '())
          (read-preserving-whitespace stream t nil nil)
          (format t "~d ~d~%" start (file-position stream))
          (loop for (a . b) in (reverse *list-spans*)
                do (format t "L ~d ~d~%" a b)))
      (error (e)
        (format t "ERROR ~d ~a~%" (or (ignore-errors (file-position stream)) start)
                (one-line (princ-to-string e)))
        (return-from report-file))))
  (format t "OK~%"))

(let ((*standard-output* (make-broadcast-stream *standard-output*)))
  (loop for path = (read-line *standard-input* nil nil)
        while path
        do (handler-case (report-file path)
             (error (e)
               (format t "ERROR 0 ~a~%" (one-line (princ-to-string e)))))))
(finish-output)
