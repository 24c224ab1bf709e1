;;;; impl-sbcl.lisp --- the few things Swank's backend does not abstract.
;;;;
;;;; Everything implementation specific used by the portable files lives
;;;; here, each with a portable fallback, the way SLIME keeps swank/sbcl.lisp
;;;; apart from swank.lisp. Another implementation gets its own branch in
;;;; these functions (or a sibling file) without touching the rest.

(in-package #:cl-mcp-server)

(eval-when (:compile-toplevel :load-toplevel :execute)
  (defun gray-symbol (name)
    "The Gray streams symbol NAME (read time, for capture.lisp): from
Swank's SWANK/GRAY where it loads one, else from the package Swank's
backend names (ABCL's GRAY-STREAMS)."
    (let ((package (or (find-package "SWANK/GRAY")
                       (find-package (swank/backend:gray-package-name)))))
      (or (find-symbol name package)
          (error "no Gray streams symbol ~A in ~A" name (package-name package))))))

(defun call-with-debugger-hooks (hook thunk)
  "Call THUNK with HOOK (a function of a condition and the old hook) as the
debugger hook. On SBCL `break' and direct `invoke-debugger' calls consult
SB-EXT:*INVOKE-DEBUGGER-HOOK* before (and even when `break' has bound
*DEBUGGER-HOOK* to NIL), so both are bound."
  (let ((*debugger-hook* hook)
        #+sbcl (sb-ext:*invoke-debugger-hook* hook))
    (funcall thunk)))

(defun frame-function-name (frame)
  "The name of the function of FRAME (a backend frame): a symbol, a list
such as (SETF FOO) or (LAMBDA () :IN FOO), a string, or NIL if unknown."
  #+sbcl (ignore-errors (sb-di:debug-fun-name (sb-di:frame-debug-fun frame)))
  #-sbcl (progn frame nil))

(defun implementation-internal-package-p (package)
  "True for the implementation's own internal packages, whose frames are
machinery around user code (signalling, evaluation, interrupts)."
  (let ((name (package-name package)))
    #+sbcl (and (>= (length name) 3) (string= "SB-" name :end2 3))
    #-sbcl (progn name nil)))

(defun ignorable-warning-p (condition)
  "Warnings that are noise for an agent: redefinitions it asked for."
  #+sbcl (typep condition 'sb-kernel:redefinition-warning)
  #-sbcl (progn condition nil))

(defun stack-exhaustion-p (condition)
  "True for control stack exhaustion (deep recursion)."
  #+sbcl (typep condition 'sb-kernel::control-stack-exhausted)
  #-sbcl (typep condition 'storage-condition))

(defun make-io-stream (input output)
  "A bidirectional stream reading INPUT and writing OUTPUT (a capture
stream), for *TERMINAL-IO* and friends during an evaluation."
  (make-two-way-stream input output))

(defun backend-find-definitions (symbol)
  "Swank's (DSPEC LOCATION) list for SYMBOL."
  (swank/backend:find-definitions symbol))

(defun macroexpand-all-form (form)
  "FORM with every macro in it expanded, through Swank's backend."
  (swank/backend:macroexpand-all form))

(defun interrupt-condition-p (condition)
  "True for the condition a Lisp without threads signals when the server
interrupts it with SIGINT (see impl-clisp.lisp); threaded Lisps are
interrupted through INTERRUPT-EVALUATION instead."
  (declare (ignore condition))
  nil)

(defun current-pid ()
  (swank/backend:getpid))

(defun function-arglist (symbol)
  "The lambda list of SYMBOL's function or macro, or :NOT-AVAILABLE."
  (swank/backend:arglist symbol))

(defun gc-and-heap-info ()
  "A short plist about memory, where the implementation can tell."
  #+sbcl (list :dynamic-usage (sb-kernel:dynamic-usage)
               :dynamic-space-size (sb-ext:dynamic-space-size))
  #-sbcl nil)

(defun special-variable-p (symbol)
  "True when SYMBOL is proclaimed special (DEFVAR without a value too)."
  #+sbcl (eq (sb-int:info :variable :kind symbol) :special)
  #-sbcl (boundp symbol))

(defun definition-positions-in-octets-p ()
  "True when the backend's definition and xref locations give file
positions in octets rather than characters (SBCL's Swank takes them from
FILE-POSITION, which counts bytes in a UTF-8 file). Compiler notes are
character positions on every backend."
  #+sbcl t
  #-sbcl nil)

(defun call-without-outer-handlers (thunk on-error)
  "Call THUNK so that handlers established outside it (Swank's, a test
harness's) never see its conditions: a condition that is only SIGNALed and
declined by THUNK's own handlers just returns, and an ERROR nobody handles
reaches the debugger (whose hook the caller has bound). On SBCL the handler
stack is rebound empty. The portable fallback cannot tell SIGNAL from ERROR
and calls ON-ERROR (a function of the condition) for every unhandled
ERROR."
  #+sbcl (progn on-error
                (let ((sb-kernel:*handler-clusters* nil))
                  (funcall thunk)))
  #-sbcl (handler-bind ((error on-error))
           (funcall thunk)))

(defun compiling-form-position ()
  "While COMPILE-FILE processes a top-level form: (values PATH OFFSET), the
file and the 0-based character offset where that form starts; NIL when
unknown. Lets an error the compiler does not catch itself (an IN-PACKAGE
of a missing package) be reported as a located diagnostic."
  #+sbcl (ignore-errors
          (let* ((info sb-c::*source-info*)
                 (stream (and info (sb-c::source-info-stream info))))
            (when (and stream (sb-impl::form-tracking-stream-p stream))
              (let ((pos (sb-impl::form-tracking-stream-form-start-char-pos stream)))
                (when pos
                  (values (namestring (truename stream)) pos))))))
  #-sbcl nil)
