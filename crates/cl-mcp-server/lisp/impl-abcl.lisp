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

  (defconstant +redelivery-period+ 0.01
    "Seconds between two raisings of ABCL's interrupt flag (DELIVER-INTERRUPT).")

  (defconstant +redelivery-limit+ 60
    "Seconds DELIVER-INTERRUPT keeps raising the flag for a thread that has
not run its interrupt (code that never checks: a long Java call).")

  (defun deliver-interrupt (thread function)
    "THREADS:INTERRUPT-THREAD queues FUNCTION for THREAD, but what makes a
thread look at its queue is one flag for the whole image (Java's
Lisp.interrupted), and the first thread to reach an interrupt check
clears it and runs its own queue, not THREAD's: the thread that sent the
interrupt, or any other running one, often gets there first (always
under load, or beside a thread left spinning), and THREAD then never
looks (a (LOOP) ran on past every timeout). So until THREAD has started
FUNCTION, has ended, or +REDELIVERY-LIMIT+ seconds passed, a thread of
ours raises the flag again every +REDELIVERY-PERIOD+ seconds. A flag
another thread takes meanwhile costs it a look at its empty queue.
THREAD's Java interrupt status (set to wake it from a wait) is cleared
when it runs FUNCTION."
    (let ((taken (list nil)))
      ;; TAKEN is read by the raising thread: both pass through the flag's
      ;; lock (Lisp's class monitor), which makes the write seen.
      (threads:interrupt-thread thread (lambda ()
                                         (setf (car taken) t)
                                         ;; INTERRUPT-THREAD also interrupts
                                         ;; the Java thread, to wake it from
                                         ;; a wait; taken at a check instead,
                                         ;; that would cut short its next
                                         ;; wait (a SLEEP returning at once).
                                         (java:jstatic "interrupted" "java.lang.Thread")
                                         (funcall function)))
      (unless (car taken)
        (threads:make-thread
         (lambda ()
           (let ((deadline (+ (get-internal-real-time)
                              (* +redelivery-limit+ internal-time-units-per-second))))
             (loop until (or (car taken)
                             (not (threads:thread-alive-p thread))
                             (> (get-internal-real-time) deadline))
                   do (java:jstatic "setInterrupted" "org.armedbear.lisp.Lisp"
                                    thread java:+true+)
                      (sleep +redelivery-period+))))
         :name "cl-mcp interrupt delivery"))
      t))

  (defun call-with-debugger-hooks (hook thunk)
    "BREAK binds *DEBUGGER-HOOK* to NIL; ABCL consults
SYS::*INVOKE-DEBUGGER-HOOK* first, as SBCL does its own."
    (let ((*debugger-hook* hook)
          (sys::*invoke-debugger-hook* hook))
      (funcall thunk)))

  (defun await-introspection ()
    "Frames are named and Swank's own hidden by ABCL-INTROSPECT's
annotations, which a start makes on a thread of its own just after Swank
is up (prelude.lisp's FINISH-BACKEND-MODULES): an error in the first
seconds waits for them."
    (let ((await (find-symbol "AWAIT-BACKEND-ANNOTATIONS" "CL-MCP-BOOT")))
      (when (and await (fboundp await))
        (funcall await))))

  (defun call-without-outer-handlers (thunk on-error)
    "The portable fallback (impl-sbcl.lisp), with the stack saved where
swank/abcl reads its frames from: SYS::*SAVED-BACKTRACE*, which only ABCL's
own debugger fills, so the error's backtrace is the stack where it arrived."
    (handler-bind ((error (lambda (c)
                            (await-introspection)
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
                      (local-function-name x)
                      (and (helper-function-p x) 'helper-closure)))
                 (t nil))))))

  (defvar *helper-class-prefixes* nil
    "The Java class-name prefixes of the helpers' compiled files, e.g.
\"org.armedbear.lisp.eval_tmp27CUP8X0FK_\" (see HELPER-FUNCTION-P).")

  (defun java-class-name (object)
    "The name of OBJECT's Java class (a compiled function's is named after
the file it was compiled to), or NIL."
    (ignore-errors (java:jcall "getName" (java:jcall "getClass" object))))

  (defun scan-helper-class-prefixes ()
    "The prefixes of the Java classes of this package's functions that
come from a file compiled under a temporary name."
    (let ((prefixes '())
          (package (find-package "CL-MCP-SERVER")))
      (do-symbols (symbol package)
        (when (and (eq (symbol-package symbol) package)
                   (fboundp symbol)
                   (not (macro-function symbol)))
          (let* ((name (java-class-name (fdefinition symbol)))
                 (end (and name (position #\_ name :from-end t))))
            (when (and end (search "_tmp" name))
              (pushnew (subseq name 0 (1+ end)) prefixes :test #'string=)))))
      prefixes))

  (defun helper-class-prefixes ()
    "Each helper file's compiled functions are classes named after the
file it was compiled to (its temporary name, unique per build:
prelude.lisp's TEMPORARY-SIBLING, NAME-tmpXXXX): the prefixes of the
classes of this package's functions, computed once (:NONE when the
helpers were loaded from source)."
    (let ((known *helper-class-prefixes*))
      (cond ((eq known :none) '())
            (known known)
            (t (let ((found (scan-helper-class-prefixes)))
                 (setf *helper-class-prefixes* (or found :none))
                 found)))))

  (defun helper-function-p (function)
    "True for a compiled function of the helpers without a name of its own
(a closure made before ABCL-INTROSPECT's annotations named its kind, in
an image's first seconds): its frames are the helpers', not the user's."
    (let ((name (java-class-name function)))
      (and name
           (some (lambda (prefix) (eql 0 (search prefix name)))
                 (helper-class-prefixes)))))

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
