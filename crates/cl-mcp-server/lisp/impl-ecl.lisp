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
the function or its name). A natively compiled anonymous function is only
an uninterned #:LAMBDAnn there, with no trace of the function around it;
the helpers' own handlers and thunks are such frames around every
evaluation (code typed into evaluate-lisp is bytecompiled and keeps its
names), so they are named as the helpers' and left out of backtraces."
    (ignore-errors
     (let ((x (first frame)))
       (cond ((and x (symbolp x) (null (symbol-package x))
                   (eql 0 (search "LAMBDA" (symbol-name x))))
              '(lambda () :in ecl-anonymous-compiled-function))
             ((symbolp x) x)
             ((functionp x) (si:compiled-function-name x))
             (t nil)))))

  (defun print-frame-text (frame stream)
    "swank/ecl prints a frame as its function object (#<bytecompiled-function
FOO 0x...>): ECL keeps no arguments in its frames, so (FOO ...) instead."
    (let ((name (frame-function-name frame)))
      (if name
          (format stream "(~S ...)" name)
          (swank/backend:print-frame frame stream))))

  (defun implementation-internal-package-p (package)
    "ECL's own packages: frames in them are machinery around user code."
    (member (package-name package)
            '("SYSTEM" "SI" "EXT" "C" "CLOS" "MP" "FFI" "GRAY" "SB-BSD-SOCKETS"
              "WALKER")
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

  (defun frame-view (frame)
    "ECL's anonymous compiled lambdas (Swank's, the server's) and the
bytecode interpreter's frames are nobody's call; a named frame shows as
(NAME ...)."
    (let ((name (frame-function-name frame)))
      (if (or (null name)
              (and (symbolp name)
                   (or (null (symbol-package name))
                       ;; The bytecode interpreter running a form.
                       (string= (symbol-name name) "BYTECODES"))))
          (values :skip nil)
          (values name (format nil "(~A ...)"
                               (if (symbolp name) (type-name-of-symbol name) name))))))

  (defun frame-locals-note (frame locals)
    (declare (ignore frame))
    (unless locals
      "none recorded: ECL keeps the variables of evaluated code and of code compiled with (debug 1) or more (the default; under (debug 0) a function has no frame at all), so this frame has none"))

  (defun compiled-frame-variables (index)
    "((SYMBOL VALUE) ...) of frame INDEX's variables when its function is
natively compiled (ECL names them by strings there, \"PKG::X\"), innermost
binding first, else NIL."
    (let ((seen '()))
      (loop for local in (ignore-errors (swank/backend:frame-locals index))
            for name = (getf local :name)
            for symbol = (and (stringp name) (symbol-from-text name))
            when (and symbol (not (constantp symbol)) (not (member symbol seen)))
              do (push symbol seen)
              and collect (list symbol (getf local :value)))))

  (defun frame-form (form index)
    "ECL evaluates code in a frame in the frame's interpreter environment,
which a natively compiled function's frame does not have: its variables
were unbound there. FORM is wrapped in a LET of copies of them, so code
reads them (setting one does not change the frame)."
    (let ((variables (compiled-frame-variables index)))
      (if variables
          `(let ,(loop for (symbol value) in variables
                       collect `(,symbol ',value))
             (declare (ignorable ,@(mapcar #'first variables)))
             ,form)
          form)))

  (defun call-without-outer-handlers (thunk on-error)
    "As on SBCL: ECL keeps its handler stack in SI::*HANDLER-CLUSTERS*, so
rebinding it empty hides the outer handlers from THUNK's conditions."
    (declare (ignore on-error))
    (let ((si::*handler-clusters* nil))
      (funcall thunk))))

#+ecl
(defun implementation-contrib-p (name)
  "As on SBCL: ECL's own modules are fasls in its system directory
(sb-bsd-sockets.fas, asdf.fas, ...)."
  (and (ignore-errors (probe-file (format nil "SYS:~A.fas" name))) t))
