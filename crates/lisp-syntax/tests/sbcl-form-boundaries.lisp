;;;; Prints where SBCL's own reader finds the top-level forms of files, and
;;;; the extent of every reader-macro construct inside them.
;;;;
;;;; Used by cst_sbcl_differential.rs:
;;;;   sbcl --script sbcl-form-boundaries.lisp < list-of-paths
;;;;
;;;; Input: one path per line (UTF-8 files). Output, per file:
;;;;   FILE <path>
;;;;   <start> <end>            one line per top-level form
;;;;   N <kind> <start> <end>   one line per construct read in that form or in
;;;;                            the comments before it (kinds below)
;;;;   OK                       or: ERROR <offset> <one-line message>
;;;; All offsets are CHARACTER offsets, end exclusive.
;;;;
;;;; Forms are read with *READ-SUPPRESS* bound to T, so packages, read-time
;;;; evaluation and unknown symbols do not matter: only the syntax does.
;;;; Adjustments that make SBCL's notion of "a form" match the CST's:
;;;; - #+/#- always read both the feature expression and the guarded form
;;;;   and return a value, so a reader conditional is one form whatever the
;;;;   features (SBCL would otherwise skip a false one silently and carry on
;;;;   with the next form);
;;;; - #n= reads the object it labels: under *READ-SUPPRESS* SBCL's #= returns
;;;;   at once and leaves the object to the enclosing read, which says the same
;;;;   thing about the text but not about where the label's extent ends;
;;;; - a comma outside any backquote is an error, as it is when SBCL reads
;;;;   for real (under *READ-SUPPRESS* SBCL lets it pass and does not even
;;;;   read the form after it), except inside #+/#-, where the CST does not
;;;;   check commas either (SBCL does only when the feature selects the form)
;;;;   and still reads the form after the comma, as its author meant (here
;;;;   SBCL under *READ-SUPPRESS* would read the comma alone, and a disabled
;;;;   `#+nil ,x` would leave `x` as the next form);
;;;; - #S and #A read their form at backquote depth zero under *READ-SUPPRESS*
;;;;   too, as SBCL does when it reads for real (so a comma in them is an
;;;;   error either way);
;;;; - the start of a form is found by skipping whitespace and comments by
;;;;   hand, because READ skips them silently;
;;;; - READ-PRESERVING-WHITESPACE, so a form ends at its last character, not
;;;;   after the whitespace that follows it.
;;;; Constructs are recorded by wrapping each standard macro character and
;;;; # dispatch function of the readtable: the wrapper notes the stream
;;;; position before and after the standard function runs. Tokens have no
;;;; macro character and are not recorded; the constructs around them pin
;;;; them down. A `;` comment is recorded without its newline, as the CST
;;;; keeps the newline out of the comment.
;;;; The file is read into a string first, so FILE-POSITION counts characters
;;;; exactly whatever the external format.

(defvar *spans* '()
  "(kind start end) of every construct read since the last top-level form.")

(defvar *text* ""
  "The file being read.")

(defun note (kind start stream)
  (let ((end (file-position stream)))
    (when (and (eq kind :line-comment)
               (> end start)
               (char= (char *text* (1- end)) #\Newline))
      (decf end))
    (push (list kind start end) *spans*)))

(defun wrap-macro-character (rt char kind &optional (standard (get-macro-character char rt)))
  (progn
    (set-macro-character
     char
     (lambda (stream c)
       (let ((start (1- (file-position stream))))
         (multiple-value-prog1 (funcall standard stream c)
           (note kind start stream))))
     nil rt)))

(defun wrap-dispatch (rt sub-char kind &optional (standard (get-dispatch-macro-character #\# sub-char rt)))
  (set-dispatch-macro-character
   #\# sub-char
   (lambda (stream c numarg)
     ;; Back over the sub-character, the digits of the argument and the #.
     (let ((start (- (file-position stream) 2
                     (if numarg (length (princ-to-string numarg)) 0))))
       (multiple-value-prog1 (funcall standard stream c numarg)
         (note kind start stream))))
   rt))

(defvar *in-conditional* nil
  "True while reading the parts of a #+ or #- expression.")

(defun reader-conditional (stream sub-char numarg)
  (declare (ignore sub-char numarg))
  (let ((*in-conditional* t))
    (read stream t nil t)
    (read stream t nil t))
  :reader-conditional)

(defun make-strict-comma (standard)
  (lambda (stream char)
    (cond ((plusp sb-impl::*backquote-depth*)
           (funcall standard stream char))
          (*in-conditional*
           (let ((sb-impl::*backquote-depth* 1))
             (funcall standard stream char)))
          (t (error "Comma not inside a backquote.")))))

(defun make-depth-zero (standard)
  (lambda (stream sub-char numarg)
    (let ((sb-impl::*backquote-depth* 0))
      (funcall standard stream sub-char numarg))))

(defun label (stream sub-char numarg)
  (declare (ignore sub-char numarg))
  (read stream t nil t))

(defvar *readtable-for-boundaries*
  (let ((rt (copy-readtable nil)))
    (loop for (char kind) in '((#\( :list) (#\" :string) (#\' :quote)
                               (#\` :backquote) (#\; :line-comment))
          do (wrap-macro-character rt char kind))
    (wrap-macro-character rt #\, :unquote
                          (make-strict-comma (get-macro-character #\, rt)))
    (loop for (sub-char kind) in '((#\\ :char) (#\' :function) (#\( :vector)
                                   (#\* :bit-vector) (#\: :uninterned)
                                   (#\. :read-eval) (#\p :pathname)
                                   (#\# :label-ref) (#\b :radix) (#\o :radix)
                                   (#\x :radix) (#\r :radix) (#\c :complex)
                                   (#\| :block-comment))
          do (wrap-dispatch rt sub-char kind))
    (wrap-dispatch rt #\= :label #'label)
    (wrap-dispatch rt #\s :structure
                   (make-depth-zero (get-dispatch-macro-character #\# #\s rt)))
    (wrap-dispatch rt #\a :array
                   (make-depth-zero (get-dispatch-macro-character #\# #\a rt)))
    (wrap-dispatch rt #\+ :conditional #'reader-conditional)
    (wrap-dispatch rt #\- :conditional #'reader-conditional)
    rt))

(defun slurp (path)
  (with-open-file (in path :external-format :utf-8)
    (let* ((buffer (make-string (file-length in)))
           (n (read-sequence buffer in)))
      (subseq buffer 0 n))))

(defun skip-trivia (stream)
  "Moves STREAM past whitespace and comments (through the readtable's own,
recording, comment functions); returns the position of the next form's
first character, or NIL at end of input."
  (loop
    (let ((c (peek-char t stream nil nil)))
      (cond ((null c) (return nil))
            ((char= c #\;)
             (funcall (get-macro-character #\;) stream (read-char stream)))
            ((char= c #\#)
             (let ((pos (file-position stream)))
               (read-char stream)
               (if (eql (read-char stream nil nil) #\|)
                   (funcall (get-dispatch-macro-character #\# #\|) stream #\| nil)
                   (progn (file-position stream pos) (return pos)))))
            (t (return (file-position stream)))))))

(defun one-line (string)
  (substitute-if #\Space (lambda (c) (member c '(#\Newline #\Return))) string))

(defun print-spans ()
  (loop for (kind start end) in (reverse *spans*)
        do (format t "N ~(~a~) ~d ~d~%" kind start end))
  (setf *spans* '()))

(defun report-file (path)
  (format t "FILE ~a~%" path)
  (setf *text* (slurp path) *spans* '())
  (let ((stream (make-string-input-stream *text*))
        (*readtable* *readtable-for-boundaries*)
        (*read-suppress* t)
        (start 0))
    (handler-case
        (loop
          (setf start (skip-trivia stream))
          (unless start (return))
          (read-preserving-whitespace stream t nil nil)
          (format t "~d ~d~%" start (file-position stream))
          (print-spans))
      (error (e)
        (setf *spans* '())
        (format t "ERROR ~d ~a~%" (or (ignore-errors (file-position stream)) start)
                (one-line (princ-to-string e)))
        (return-from report-file)))
    (print-spans))
  (format t "OK~%"))

(loop for path = (read-line *standard-input* nil nil)
      while path
      do (handler-case (report-file path)
           (error (e)
             (format t "ERROR 0 ~a~%" (one-line (princ-to-string e))))))
(finish-output)
