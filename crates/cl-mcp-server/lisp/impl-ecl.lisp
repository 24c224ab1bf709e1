;;;; impl-ecl.lisp --- the ECL layer: what impl-sbcl.lisp's portable
;;;; fallbacks cannot know on ECL, through ECL's own API and Swank's
;;;; swank/ecl backend (as SLIME keeps swank/ecl.lisp apart from swank.lisp).
;;;;
;;;; Loaded after impl-sbcl.lisp, whose definitions (SBCL branches plus
;;;; portable fallbacks) these replace on ECL only; on any other Lisp this
;;;; file is empty.

(in-package #:cl-mcp-server)

#+ecl
(progn
  (defun frame-function-name (frame)
    "The function name of a swank/ecl frame (a list whose first element is
the function or its name)."
    (ignore-errors
     (let ((x (first frame)))
       (cond ((symbolp x) x)
             ((functionp x) (si:compiled-function-name x))
             (t nil)))))

  (defun implementation-internal-package-p (package)
    "ECL's own packages: frames in them are machinery around user code."
    (member (package-name package)
            '("SYSTEM" "EXT" "C" "CLOS" "MP" "FFI" "GRAY" "SB-BSD-SOCKETS")
            :test #'string=))

  (defun stack-exhaustion-p (condition)
    (typep condition '(or ext:stack-overflow storage-condition)))

  (defun call-with-debugger-hooks (hook thunk)
    "BREAK binds *DEBUGGER-HOOK* to NIL; ECL consults
EXT:*INVOKE-DEBUGGER-HOOK* first, as SBCL does its own."
    (let ((*debugger-hook* hook)
          (ext:*invoke-debugger-hook* hook))
      (funcall thunk)))

  (defun macroexpand-all-form (form)
    "ECL's walker (what swank/ecl uses) leaves some standard macros such as
WHEN unexpanded at the top: expand the form itself first, then walk it."
    (walker:macroexpand-all (macroexpand form)))

  (defun special-variable-p (symbol)
    (si:specialp symbol))

  (defun gc-and-heap-info ()
    (list :heap-size (ignore-errors (ext:get-limit 'ext:heap-size))))

  (defun call-without-outer-handlers (thunk on-error)
    "As on SBCL: ECL keeps its handler stack in SI::*HANDLER-CLUSTERS*, so
rebinding it empty hides the outer handlers from THUNK's conditions."
    (declare (ignore on-error))
    (let ((si::*handler-clusters* nil))
      (funcall thunk))))
