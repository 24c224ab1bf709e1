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
  (defun frame-function-name (frame)
    "CLISP frames have no function objects Swank exposes: the name is read
from the frame's printed description (\"APPLY frame for call (FOO 1)\",
\"EVAL frame for form (FOO 1)\"), or NIL."
    (ignore-errors
     (let* ((text (with-output-to-string (s) (sys::describe-frame s frame)))
            (open (position #\( text)))
       (when open
         (let ((*read-eval* nil))
           (let ((form (read-from-string text nil nil :start open)))
             (and (consp form) (symbolp (first form)) (first form))))))))

  (defun implementation-internal-package-p (package)
    (member (package-name package)
            '("SYSTEM" "EXT" "CLOS" "CUSTOM" "GRAY" "FFI" "SOCKET" "CHARSET"
              "I18N" "POSIX" "SCREEN" "REGEXP")
            :test #'string=))

  (defun stack-exhaustion-p (condition)
    (or (typep condition 'storage-condition)
        (search "stack overflow" (ignore-errors (princ-to-string condition)))))

  (defun interrupt-condition-p (condition)
    "SIGINT (the server's timeout or cancellation) breaks into CLISP with
this condition."
    (typep condition 'system::interrupt-condition))

  (defun macroexpand-all-form (form)
    "CLISP's EXT:EXPAND-FORM (what swank/clisp uses) leaves macros such as
WHEN that its compiler handles itself unexpanded: expand the form itself
first, then the rest."
    (ext:expand-form (macroexpand form)))

  (defun special-variable-p (symbol)
    (ext:special-variable-p symbol))

  (defun ignorable-warning-p (condition)
    "CLISP warns when a function is redefined (clos:defun with a new
definition); that is what the agent asked for."
    (let ((text (ignore-errors (princ-to-string condition))))
      (and text (or (search "redefin" text) (search "DEFUN/DEFMACRO" text))
           t))))
