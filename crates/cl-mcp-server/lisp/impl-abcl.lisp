;;;; impl-abcl.lisp --- the ABCL layer: what impl-sbcl.lisp's portable
;;;; fallbacks cannot do on Armed Bear Common Lisp.
;;;;
;;;; Loaded after impl-sbcl.lisp, whose definitions these replace on ABCL
;;;; only; on any other Lisp this file is empty.

(in-package #:cl-mcp-server)

#+abcl
(progn
  (defun make-io-stream (input output)
    "ABCL's MAKE-TWO-WAY-STREAM takes only its own (Java) streams, not the
helpers' Gray capture streams: what an evaluation writes to *TERMINAL-IO*
(and *QUERY-IO*, *DEBUG-IO*) is dropped on ABCL; *STANDARD-OUTPUT* and
*ERROR-OUTPUT* are still captured."
    (declare (ignore output))
    (make-two-way-stream input (make-broadcast-stream)))

  (defun call-with-build-hooks (thunk)
    "swank/abcl's compilation hooks are empty: only its own
SWANK-COMPILE-FILE turns the compiler's warnings into COMPILER-CONDITIONs.
A build (ASDF's COMPILE-FILE calls) gets the same, so its warnings become
located diagnostics rather than lines on stderr: the file being compiled
and the position of the form the compiler is at, when it is in a file."
    (let ((jvm::*resignal-compiler-warnings* t)
          (seen '()))
      (handler-bind ((warning
                       (lambda (c)
                         (unless (member c seen)
                           (push c seen)
                           (let ((file jvm::*compile-file-pathname*)
                                 (position system::*source-position*))
                             (signal 'swank/backend:compiler-condition
                                     :original-condition c
                                     :severity (if (typep c 'style-warning)
                                                   :style-warning
                                                   :warning)
                                     :message (format nil "~A" c)
                                     :location
                                     (if (and file position)
                                         (list :location
                                               (list :file (namestring (truename file)))
                                               (list :position (1+ position))
                                               nil)
                                         (list :error "no source location"))))))))
        (funcall thunk))))

  (defun call-with-debugger-hooks (hook thunk)
    "BREAK binds *DEBUGGER-HOOK* to NIL; ABCL consults
SYS::*INVOKE-DEBUGGER-HOOK* first, as SBCL does its own."
    (let ((*debugger-hook* hook)
          (sys::*invoke-debugger-hook* hook))
      (funcall thunk)))

  (defun call-without-outer-handlers (thunk on-error)
    "The portable fallback (impl-sbcl.lisp), with the stack saved where
swank/abcl reads its frames from: SYS::*SAVED-BACKTRACE*, which only ABCL's
own debugger fills, so the error's backtrace is the stack where it arrived."
    (handler-bind ((error (lambda (c)
                            (let ((sys::*saved-backtrace* (sys:backtrace)))
                              (funcall on-error c)))))
      (funcall thunk)))

  (defun frame-function-name (frame)
    "The function name of an ABCL frame: a Lisp frame's function (or its
name); a Java frame's text, which the backtrace treats as foreign."
    (ignore-errors
     (if (typep frame 'sys::java-stack-frame)
         (princ-to-string frame)
         (let ((x (first (sys:frame-to-list frame))))
           (cond ((symbolp x) x)
                 ((functionp x)
                  (or (nth-value 2 (function-lambda-expression x))
                      (local-function-name x)))
                 (t nil))))))

  (defun local-function-name (function)
    "(LAMBDA () :IN F) for a compiled local function of the helpers' F,
which ABCL names only in print (#<LOCAL-FUNCTION IN F {...}>); else NIL."
    (let* ((text (princ-to-string function))
           (prefix "#<LOCAL-FUNCTION IN ")
           (end (position #\Space text :start (min (length text) (length prefix)))))
      (when (and end (eql 0 (search prefix text)))
        (let ((symbol (find-symbol (subseq text (length prefix) end) "CL-MCP-SERVER")))
          (and symbol (list 'lambda '() :in symbol))))))

  (defun frame-locals-note (frame locals)
    (declare (ignore frame locals))
    "ABCL keeps a frame's arguments only (named from its function's lambda list), not its other variables")

  (defun implementation-internal-package-p (package)
    "ABCL's own packages: frames in them are machinery around user code."
    (member (package-name package)
            '("SYSTEM" "EXTENSIONS" "JAVA" "THREADS" "PRECOMPILER" "JVM"
              "LOOP" "MOP" "GRAY-STREAMS")
            :test #'string=)))
