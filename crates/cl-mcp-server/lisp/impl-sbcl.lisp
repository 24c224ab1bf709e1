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

(defun call-with-stepper (thunk)
  "Call THUNK so that SBCL's single stepper (STEP, or stepping started from
the debugger) enters the debugger at each stepped form, as SLDB does:
the debugger tools then step into, over or out of it."
  #+sbcl
  (let ((sb-ext:*stepper-hook*
          (lambda (condition)
            (when (typep condition 'sb-ext:step-form-condition)
              (let ((sb-debug:*stack-top-hint* (sb-di::find-stepped-frame)))
                (invoke-debugger condition))))))
    (funcall thunk))
  #-sbcl (funcall thunk))

(defun frame-function-name (frame)
  "The name of the function of FRAME (a backend frame): a symbol, a list
such as (SETF FOO) or (LAMBDA () :IN FOO), a string, or NIL if unknown."
  #+sbcl (ignore-errors (sb-di:debug-fun-name (sb-di:frame-debug-fun frame)))
  #-sbcl (progn frame nil))

(defun tracer-frame-call (frame)
  "When FRAME is the tracer's wrapper around a call of a traced function
(SBCL's SB-DEBUG::TRACE-CALL), (values NAME ARGS) of that call; else NIL."
  #+sbcl (ignore-errors
          (multiple-value-bind (name args) (sb-debug::frame-call frame)
            (when (and (eq name 'sb-debug::trace-call) (consp args) (consp (cdr args)))
              (values (sb-debug::trace-info-what (first args)) (cddr args)))))
  #-sbcl (progn frame nil))

(defun print-frame-text (frame stream)
  "Prints FRAME (a backend frame) as backtraces show it: Swank's text."
  (swank/backend:print-frame frame stream))

(defun frame-view (frame)
  "(values NAME TEXT) for deciding whether FRAME is the user's and showing
it: NAME as FRAME-FUNCTION-NAME gives it, or :SKIP for frames that are
nobody's call (CLISP's EVAL and binding frames, ECL's anonymous compiled
lambdas of Swank and the server); TEXT replaces the printed frame, or NIL."
  (values (frame-function-name frame) nil))

(defun frame-env-index (index)
  "The frame whose variables are those of frame INDEX's function: INDEX
itself, except on CLISP, where an interpreted function's APPLY frame has
none and the innermost EVAL frame of its body (below it, before the next
call) holds its lexical environment."
  index)

(defun frame-locals-note (frame locals)
  "What to say beside FRAME's LOCALS (Swank's FRAME-LOCALS list), or NIL:
why there are none, in this Lisp's terms (what it needs to keep them)."
  (declare (ignore frame))
  (unless locals
    #+sbcl "none known: compile with (debug 2) or more to see them"
    #-sbcl "none recorded for this frame"))

(defun frame-action-advice (operation)
  "What a frame needs on this Lisp so that OPERATION (:return, :restart)
works on it, for the message when it did not."
  (ecase operation
    (:return
     #+sbcl "Only frames of functions compiled with (debug 2) or more can return a value, e.g. after (declaim (optimize (debug 2)))."
     #-sbcl "Choose one of the listed restarts instead.")
    (:restart
     #+sbcl "A frame can be restarted when its function was compiled with (debug 2) or more, e.g. after (declaim (optimize (debug 2))); otherwise fix the function and call it again with evaluate-lisp."
     #-sbcl "Fix the function and call it again with evaluate-lisp.")))

(defun frame-operation-problem (operation index frame)
  "Why OPERATION (:return, :restart) cannot work on FRAME (number INDEX)
on this Lisp, said before trying, or NIL."
  (declare (ignore operation index frame))
  nil)

(defun frame-form (form index)
  "FORM as it is evaluated in frame INDEX (Swank's EVAL-IN-FRAME): itself,
where the backend evaluates it in the frame's own lexical environment."
  (declare (ignore index))
  form)

(defun call-entering-debugger (thunk)
  "THUNK's values, run in a debugger level (code in a frame, a restart's
values): an error it does not handle enters a nested level, as it does
here with nothing in the way."
  (funcall thunk))

(defun stepper-available-p ()
  "Whether the debugger can single-step (debug.lisp's DEBUGGER-STEP):
SBCL's stepper, driven through Swank."
  #+sbcl t
  #-sbcl nil)

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

(defun stack-guard-disarmed-p ()
  "Whether this thread's control stack guard page is down: T after the
thread ran out of stack and before it unwound past the page above the
guard (SBCL re-arms it there), NIL while armed, :UNKNOWN on a Lisp that
does not say. Running out again while it is down is fatal to the image."
  #+sbcl
  ;; The first byte of the state word is the "guard page protected" flag.
  (zerop (sb-sys:sap-ref-8 (sb-thread::current-thread-sap)
                           (ash sb-vm::thread-state-word-slot sb-vm:word-shift)))
  #-sbcl :unknown)

(defun restore-stack-guard ()
  "After a control stack exhaustion was unwound, protect the thread's guard
page again. SBCL re-arms it only when the stack next grows through the page
above it; a thread that ends first leaves its stack memory disarmed for
the next thread that reuses it, and a second exhaustion there kills the
whole image (\"control_stack_guard_page_protected not NIL\"). Call it only
where the stack is shallow (the guard page is then written to zero)."
  #+sbcl
  (when (stack-guard-disarmed-p)
    (sb-alien:alien-funcall
     (sb-alien:extern-alien "reset_thread_control_stack_guard_page"
                            (function sb-alien:void sb-sys:system-area-pointer))
     (sb-thread::current-thread-sap)))
  #-sbcl nil)

#+sbcl
(defun frame-call-arguments (frame)
  "The arguments FRAME's function was called with, read from the frame:
(values LIST NIL), or (values NIL REASON) when the frame cannot tell them.
A key or optional argument is passed only when it was supplied, as far as
the function could tell: one with a supplied-p variable only when that is
true; one without is passed with its value (the function binds the same
either way). Unlike SBCL's FRAME-CALL, which passes every defaulted key
explicitly (so a supplied-p check, or split-sequence's \"both TEST and
TEST-NOT\", sees a different call)."
  (when (sb-di::all-args-available-p frame)
    ;; Stopped before its code ran: the arguments as passed.
    (return-from frame-call-arguments (values (sb-debug::early-frame-args frame) nil)))
  (let ((location (sb-di:frame-code-location frame))
        (args '())
        (optionals-over nil))
    (flet ((known-p (var)
             (and (typep var 'sb-di:debug-var)
                  (eq (sb-di:debug-var-validity var location) :valid)))
           (refuse (why)
             (return-from frame-call-arguments (values nil why))))
      (flet ((value (var what)
               (if (known-p var)
                   (sb-di:debug-var-value var frame)
                   (refuse (format nil "its ~A is no longer in the frame (the compiler dropped or reused it)"
                                   what)))))
        (handler-case
            (dolist (element (sb-di:debug-fun-lambda-list (sb-di:frame-debug-fun frame)))
              (cond ((eq element :deleted)
                     (refuse "an argument its code never uses is gone from the frame"))
                    ((atom element)
                     (push (value element "required argument") args))
                    (t
                     (ecase (first element)
                       (:optional
                        (destructuring-bind (var &optional supplied) (rest element)
                          (let ((supplied (if (known-p supplied) (sb-di:debug-var-value supplied frame) t)))
                            (cond (optionals-over)
                                  (supplied (push (value var "optional argument") args))
                                  ;; Those after one not supplied were not either.
                                  (t (setf optionals-over t))))))
                       (:rest
                        (return-from frame-call-arguments
                          (values (append (reverse args) (value (second element) "&rest list")) nil)))
                       (:keyword
                        (destructuring-bind (key var &optional supplied) (rest element)
                          (when (and (not (eq var :deleted))
                                     (if (known-p supplied) (sb-di:debug-var-value supplied frame) t))
                            (push key args)
                            (push (value var (format nil "~S argument" key)) args))))
                       (:more
                        (refuse "its arguments were passed in a way the frame does not record (&more)"))))))
          (sb-di:lambda-list-unavailable ()
            (refuse "the frame does not record its lambda list")))
        (values (nreverse args) nil)))))

(defun restart-frame-with-its-arguments (frame)
  "Restart FRAME (a debugger frame): unwind to it and call its function
again (its current definition, when it is named) with the arguments it
was called with (FRAME-CALL-ARGUMENTS). Does not return when it restarts;
returns a string saying why it cannot, or :UNSUPPORTED where this is not
SBCL."
  #+sbcl
  (cond ((not (sb-debug:frame-has-debug-tag-p frame))
         "its function was compiled without a restart point (below (debug 2)), or it was entered by a tail call and is not the frame it seems")
        (t
         (multiple-value-bind (args why) (frame-call-arguments frame)
           (or why
               (let* ((name (ignore-errors (sb-di:debug-fun-name (sb-di:frame-debug-fun frame))))
                      (fun (if (and name (sb-int:legal-fun-name-p name) (fboundp name))
                               (fdefinition name)
                               (sb-di:debug-fun-fun (sb-di:frame-debug-fun frame)))))
                 (if (functionp fun)
                     (sb-debug:unwind-to-frame-and-call frame (lambda () (apply fun args)))
                     "its function is not known"))))))
  #-sbcl (progn frame :unsupported))

(defun stack-room ()
  "The fraction of the current thread's control stack still free (1.0 when
unknown), to stop deep work before it reaches the guard page: running out
of stack while allocating is fatal to the whole SBCL image."
  #+(and sbcl x86-64)
  (let ((start (sb-sys:sap-int (sb-vm::current-thread-offset-sap
                                 sb-vm::thread-control-stack-start-slot)))
        (end (sb-sys:sap-int (sb-vm::current-thread-offset-sap
                               sb-vm::thread-control-stack-end-slot)))
        (sp (sb-sys:sap-int (sb-kernel:current-sp))))
    (if (and (integerp start) (integerp end) (< start sp end))
        (/ (float (- sp start)) (- end start))
        1.0))
  #-(and sbcl x86-64) 1.0)

(defun frame-stack-room (frame)
  "The fraction of its thread's control stack free beyond debugger frame
FRAME (1.0 when unknown): near 0 for a frame close to where the stack ran
out."
  #+(and sbcl x86-64)
  (let ((start (sb-sys:sap-int (sb-vm::current-thread-offset-sap
                                 sb-vm::thread-control-stack-start-slot)))
        (end (sb-sys:sap-int (sb-vm::current-thread-offset-sap
                               sb-vm::thread-control-stack-end-slot)))
        (fp (ignore-errors (sb-sys:sap-int (sb-di::frame-pointer frame)))))
    (if (and (integerp fp) (< start fp end))
        (/ (float (- fp start)) (- end start))
        1.0))
  #-(and sbcl x86-64) (progn frame 1.0))

(defmacro with-stack-guard (&body body)
  "Runs BODY (the whole of a request on its own thread); afterwards the
thread's stack guard is armed again, however BODY ended."
  `(unwind-protect (progn ,@body) (restore-stack-guard)))

(defun make-io-stream (input output)
  "A bidirectional stream reading INPUT and writing OUTPUT (a capture
stream), for *TERMINAL-IO* and friends during an evaluation."
  (make-two-way-stream input output))

(defun restart-lambda-list (restart)
  "The lambda list of RESTART's function (what INVOKE-RESTART's arguments
must fit), or :UNKNOWN."
  #+sbcl (let ((f (ignore-errors (sb-kernel::restart-function restart))))
           (if (functionp f)
               (swank/backend:arglist f)
               :unknown))
  #-sbcl (progn restart :unknown))

(defun call-with-build-hooks (thunk)
  "Call THUNK (a build) so that each compiler warning is signalled as
Swank's COMPILER-CONDITION, with its location, as Swank's backend does
when it compiles a file itself."
  (swank/backend:with-compilation-hooks ()
    (funcall thunk)))

(defun backend-find-definitions (symbol)
  "Swank's (DSPEC LOCATION) list for SYMBOL."
  (swank/backend:find-definitions symbol))

(defun macroexpand-all-form (form)
  "FORM with every macro in it expanded, through Swank's backend."
  (swank/backend:macroexpand-all form))

(defun call-with-top-frames (count function)
  "Call FUNCTION where SWANK/BACKEND:COMPUTE-BACKTRACE sees the stack of
the caller, of which RAW-BACKTRACE wants only the top COUNT frames (an
implementation that walks the whole stack first may stop at COUNT)."
  (declare (ignore count))
  (swank/backend:call-with-debugging-environment function))

(defun deliver-interrupt (thread function)
  "Make THREAD run FUNCTION (of no arguments) through an interrupt: where
it is, at the next point the implementation lets it. Swank's backend does
it; where an implementation can lose an interrupt (impl-abcl.lisp), this
keeps at it until THREAD has run FUNCTION."
  (swank/backend:interrupt-thread thread function))

(defun interrupt-condition-p (condition)
  "True for the condition a Lisp without threads signals when the server
interrupts it with SIGINT (see impl-clisp.lisp); threaded Lisps are
interrupted through INTERRUPT-EVALUATION instead."
  (declare (ignore condition))
  nil)

;;; O_NONBLOCK, which SB-UNIX does not export (Linux and the BSDs).
#+sbcl
(defconstant +o-nonblock+ #+linux #o4000 #-linux 4)

(defun source-file-problem (path file-id)
  "Why the file at PATH (a native path) must not be compiled, or NIL. The
server checked it; this checks what the compiler is about to open: PATH is
opened without waiting (a named pipe swapped in meanwhile would wait for a
writer forever), and the opened descriptor must be a regular file and,
when FILE-ID (DEVICE INODE) is given, the very file the server checked.
The portable fallback knows no way to ask and returns NIL (the server
also watches the path while the compiler opens it)."
  #+sbcl
  (let ((fd (sb-unix:unix-open path (logior sb-unix:o_rdonly +o-nonblock+) 0)))
    (if (null fd)
        (format nil "Cannot open ~A now: it was removed or replaced after the server ~
                     checked it. Nothing was compiled." path)
        (unwind-protect
             (multiple-value-bind (ok dev ino mode) (sb-unix:unix-fstat fd)
               (cond ((not ok) nil)
                     ((/= (logand mode sb-unix:s-ifmt) sb-unix:s-ifreg)
                      (format nil "~A is no longer a regular file (a named pipe, device or ~
                                   directory stands at that path now; it was replaced after ~
                                   the server checked it). Nothing was compiled." path))
                     ((and file-id (not (and (eql dev (first file-id))
                                             (eql ino (second file-id)))))
                      (format nil "~A was replaced by another file after the server checked ~
                                   it. Nothing was compiled; compile it again." path))
                     (t nil)))
          (sb-unix:unix-close fd))))
  #-sbcl
  (progn path file-id nil))

;;; A build's own opens (COMPILE-FILE's of its source, LOAD's, and any the
;;; compiled code makes while it loads) never wait on a named pipe: the
;;; file a build was handed can be swapped for one between every check and
;;; the compiler's open by name, and opening a pipe to read waits for a
;;; writer forever. While *GUARDED-OPENS* is true in a thread, SBCL's one
;;; open (SB-UNIX:UNIX-OPEN, under OPEN) is made without waiting, and what
;;; it opened is checked on the descriptor: a pipe or socket is closed and
;;; the open fails (ENXIO), its path kept in *REFUSED-OPEN*; anything else
;;; is handed on as a blocking descriptor, as OPEN made it.

(defvar *guarded-opens* nil
  "True in a thread whose opens must never wait on a named pipe (see
CALL-WITH-GUARDED-OPENS).")

(defvar *refused-open* nil
  "The native path of the first pipe or socket a guarded open refused, in
the thread of CALL-WITH-GUARDED-OPENS.")

#+sbcl
(progn
  (defconstant +s-ififo+ #o010000)
  (defconstant +s-ifsock+ #o140000)
  (defconstant +enxio+ 6)
  (defconstant +f-getfl+ 3)
  (defconstant +f-setfl+ 4)

  (defun set-blocking (fd)
    "Clear O_NONBLOCK of the descriptor FD."
    (let ((fcntl (sb-alien:extern-alien
                  "fcntl" (function sb-alien:int sb-alien:int sb-alien:int sb-alien:int))))
      (let ((flags (sb-alien:alien-funcall fcntl fd +f-getfl+ 0)))
        (when (>= flags 0)
          (sb-alien:alien-funcall fcntl fd +f-setfl+ (logand flags (lognot +o-nonblock+)))))))

  (defun guarded-unix-open (open path flags mode keys)
    "SB-UNIX:UNIX-OPEN's encapsulation: OPEN (the original) of PATH, FLAGS,
MODE and KEYS, made without waiting in a guarded thread (see above)."
    (if (not *guarded-opens*)
        (apply open path flags mode keys)
        (multiple-value-bind (fd errno) (apply open path (logior flags +o-nonblock+) mode keys)
          (if (null fd)
              (values fd errno)
              (multiple-value-bind (ok dev ino fmode) (sb-unix:unix-fstat fd)
                (declare (ignore dev ino))
                (cond ((and ok (member (logand fmode sb-unix:s-ifmt)
                                       (list +s-ififo+ +s-ifsock+)))
                       (sb-unix:unix-close fd)
                       (unless *refused-open* (setf *refused-open* path))
                       (values nil +enxio+))
                      (t (set-blocking fd)
                         (values fd errno))))))))

  (unless (sb-int:encapsulated-p 'sb-unix:unix-open 'guarded-open)
    (sb-int:encapsulate 'sb-unix:unix-open 'guarded-open
                        (lambda (open path flags mode &rest keys)
                          (guarded-unix-open open path flags mode keys)))))

(defun call-with-guarded-opens (thunk)
  "Call THUNK with the opens of this thread never waiting on a named pipe
or socket (SBCL: refused at the open, see GUARDED-UNIX-OPEN). Returns
THUNK's values; *REFUSED-OPEN* says afterwards whether an open was refused.
The portable fallback only calls THUNK: the server releases a reader stuck
on a pipe (see the lisp-compile-file tool)."
  (let ((*guarded-opens* #+sbcl t #-sbcl nil))
    (funcall thunk)))

(defun current-pid ()
  (swank/backend:getpid))

(defun open-local-listener (name)
  "A listener on the Linux abstract Unix socket NAME for the evaluation
channel (direct.lisp), or NIL where this Lisp cannot open one, and the
channel listens on loopback TCP instead. A Unix socket round trip costs a
fraction of a loopback TCP one: no TCP stack, and the kernel wakes the
reader on the writer's core."
  #+(and sbcl linux)
  (let ((socket (make-instance 'sb-bsd-sockets:local-abstract-socket :type :stream)))
    (handler-case (progn (sb-bsd-sockets:socket-bind socket name)
                         (sb-bsd-sockets:socket-listen socket 1)
                         socket)
      (error ()
        (ignore-errors (sb-bsd-sockets:socket-close socket))
        nil)))
  #-(and sbcl linux) (progn name nil))

(defun accept-local-connection (listener)
  "The next connection to LISTENER (from OPEN-LOCAL-LISTENER), as a stream
of octets."
  #+sbcl (sb-bsd-sockets:socket-make-stream (sb-bsd-sockets:socket-accept listener)
                                            :input t :output t :buffering :full
                                            :element-type '(unsigned-byte 8))
  #-sbcl (error "no local listener ~A on this Lisp" listener))

(defun close-local-listener (listener)
  #+sbcl (sb-bsd-sockets:socket-close listener)
  #-sbcl (progn listener nil))

(defun function-arglist (symbol)
  "The lambda list of SYMBOL's function or macro, or :NOT-AVAILABLE."
  (swank/backend:arglist symbol))

(defun gc-and-heap-info ()
  "A short plist about memory, where the implementation can tell."
  #+sbcl (list :dynamic-usage (sb-kernel:dynamic-usage)
               :dynamic-space-size (sb-ext:dynamic-space-size))
  #-sbcl nil)

;;; The memory limit (capture.lisp's CHECK-MEMORY-LIMIT).

(defun heap-in-use ()
  "Bytes of heap in use (live data and garbage not yet collected), or NIL
where the implementation cannot tell."
  #+sbcl (sb-kernel:dynamic-usage)
  #-sbcl nil)

(defun collect-all-garbage ()
  "A full collection: every generation, so only live data stays in use."
  #+sbcl (sb-ext:gc :full t)
  #-sbcl nil)

(defun collect-young-garbage ()
  "A collection of the young generation (build.lisp, after a build)."
  #+sbcl (sb-ext:gc)
  #-sbcl nil)

(defun call-after-each-gc (symbol)
  "Makes the function named SYMBOL run after each garbage collection, in
the thread that triggered it (SBCL runs its after-GC hooks synchronously
there, with interrupts as they were); true where the implementation can."
  #+sbcl (progn (pushnew symbol sb-ext:*after-gc-hooks*) t)
  #-sbcl (progn symbol nil))

(defun call-at-each-start (symbol)
  "Makes the function named SYMBOL run again each time a saved image of
this Lisp (the server's cached core) starts."
  #+sbcl (pushnew symbol sb-ext:*init-hooks*)
  #-sbcl symbol)

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
  ;; SBCL's own initial handlers stay: they run the single stepper (STEP)
  ;; and muffle the warnings SB-EXT:*MUFFLED-WARNINGS* names.
  #+sbcl (progn on-error
                (let ((sb-kernel:*handler-clusters*
                        (if (boundp 'sb-kernel::**initial-handler-clusters**)
                            (symbol-value 'sb-kernel::**initial-handler-clusters**)
                            nil)))
                  (funcall thunk)))
  #-sbcl (handler-bind ((error on-error))
           (funcall thunk)))

(defun xref-available-p ()
  "Whether the backend's who-calls family has any data to answer from."
  t)

(defun call-seeing-errors-first (on-error thunk)
  "Call THUNK so that an ERROR it does not handle reaches ON-ERROR before
any outer handler. Where CALL-WITHOUT-OUTER-HANDLERS is the portable
fallback (an outer ERROR handler, e.g. on CLISP), that handler would see
the error before the debugger hook an inner caller (a build) binds, so
ON-ERROR is THUNK's own ERROR handler there; SBCL and ECL hide the outer
handlers, and the debugger hook sees it first anyway."
  #+(or sbcl ecl) (progn on-error (funcall thunk))
  #-(or sbcl ecl) (handler-bind ((error on-error)) (funcall thunk)))

(defun read-error-of-compile-p (condition)
  "Whether CONDITION, signalled out of COMPILE-FILE, is a read error of the
source (build.lisp's CALL-BUILDING makes it a located diagnostic): a
reader or package error (CLISP's impl file adds its syntax errors)."
  (typep condition '(or reader-error package-error)))

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

;;; Debugging tools (debug.lisp): trace, threads, the statistical profiler.

#+sbcl
(eval-when (:compile-toplevel :load-toplevel :execute)
  (require :sb-sprof))

(defun trace-spec-supported-p (spec)
  "True when SPEC names something the tracer here can trace: on SBCL a
function name, (SETF NAME) or (METHOD NAME QUALIFIER* (SPECIALIZER*));
elsewhere only symbols (through Swank's WRAP)."
  #+sbcl (or (symbolp spec)
             (and (consp spec) (member (first spec) '(setf method))))
  #-sbcl (symbolp spec))

(defun trace-spec-syntax-hint ()
  "What a trace spec may be besides a symbol or (SETF NAME), for a message."
  #+sbcl " or (method name qualifiers... (specializers...))"
  #-sbcl "")

(defun trace-reporter ()
  "The reporter INSTALL-TRACE hands calls to: TRACE-REPORT (trace.lisp),
through TRACE-REPORT-SBCL on SBCL."
  #+sbcl 'trace-report-sbcl
  #-sbcl 'trace-report)

#+sbcl
(defun trace-report-sbcl (depth name event frame values)
  "SBCL's TRACE calls its :REPORT function with a frame too."
  (declare (ignore frame))
  (trace-report depth name event values))

(defun trace-spec-defined-p (spec)
  "Whether SPEC names an existing function or method."
  (if (and (consp spec) (eq (first spec) 'method))
      (trace-spec-method spec)
      (ignore-errors (fboundp spec))))

(defun trace-spec-method (spec)
  "The method SPEC, (METHOD NAME QUALIFIER* (SPECIALIZER*)), names, or NIL."
  (let* ((name (second spec))
         (rest (cddr spec))
         (qualifiers (butlast rest))
         (specializers (car (last rest))))
    (and (fboundp name)
         (typep (fdefinition name) 'generic-function)
         (listp specializers)
         (ignore-errors
          (find-method (fdefinition name) qualifiers
                       (mapcar (lambda (s)
                                 (if (and (consp s) (eq (first s) 'eql))
                                     #+sbcl (sb-mop:intern-eql-specializer (second s)) #-sbcl s
                                     (find-class s)))
                               specializers)
                       nil)))))

(defun trace-caveat (spec)
  "Why tracing SPEC may record fewer calls than the code makes, or NIL: a
function declared inline (compiled callers include its body) or a
standard one the compiler open-codes, or a macro (its expansions are what
is recorded)."
  (cond ((not (symbolp spec)) nil)
        ((macro-function spec)
         (format nil "~A is a macro: the records are its expansions (each call of the macro function with the form), made when code using it is compiled or evaluated, not calls at run time."
                 spec))
        ((and (eq (symbol-package spec) (find-package "COMMON-LISP")) (fboundp spec))
         (format nil "~A is a standard function: compiled callers may open-code it (make no call), so their calls may not be recorded; calls through FUNCALL or APPLY are."
                 spec))
        (#+sbcl (eq (sb-int:info :function :inlinep spec) 'inline)
         #-sbcl nil
         (format nil "~A is declared inline: callers compiled after that include its body, so their calls are not recorded (recompile them under (declaim (notinline ~(~A~))) to see them)."
                 spec spec))))

(defun slot-accessor-method-p (method)
  "True for the reader or writer method DEFCLASS made for a slot: SBCL's
generic function reads or writes the slot without calling it (so tracing
it would record nothing)."
  #+sbcl (typep method 'sb-mop:standard-accessor-method)
  #-sbcl (progn method nil))

(defun install-trace (spec reporter)
  "Trace SPEC so that every call and return is handed to REPORTER (a
symbol naming a function of DEPTH NAME EVENT ARGS-OR-VALUES, EVENT being
:ENTER, :EXIT or :NON-LOCAL-EXIT), printing nothing."
  #+sbcl (let ((*trace-output* (make-broadcast-stream)))
           (eval `(trace ,spec :report ,reporter)))
  #-sbcl (let ((depths (make-hash-table :test 'eq)))
           (flet ((depth (delta)
                    (let ((thread (swank/backend:current-thread)))
                      (incf (gethash thread depths 0) delta))))
             (swank/backend:wrap spec 'cl-mcp-trace
                                 :before (lambda (args)
                                           (funcall reporter (depth 0) spec :enter args)
                                           (depth 1))
                                 :after (lambda (values)
                                          (depth -1)
                                          (if (eq values :exited-non-locally)
                                              (funcall reporter (depth 0) spec :non-local-exit nil)
                                              (funcall reporter (depth 0) spec :exit values)))))))

(defun remove-trace (spec)
  #+sbcl (eval `(untrace ,spec))
  #-sbcl (swank/backend:unwrap spec 'cl-mcp-trace))

(defun implementation-main-thread ()
  "SBCL's main thread (threads.lisp's IMAGE-MAIN-THREAD), else NIL."
  #+sbcl (sb-thread:main-thread)
  #-sbcl nil)

(defun symbol-value-in-thread (symbol thread)
  "The value of the special SYMBOL in THREAD, or NIL when unbound there or
where the implementation cannot read another thread's bindings."
  #+sbcl (multiple-value-bind (v ok)
             (ignore-errors (sb-thread:symbol-value-in-thread symbol thread nil))
           (and ok v))
  #-sbcl (progn symbol thread nil))

(defun thread-waiting-on (thread)
  "What THREAD is blocked on (a string), or NIL when running or unknown."
  #+sbcl (let ((what (ignore-errors (sb-thread::thread-waiting-for thread))))
           (and what (ignore-errors
                      (princ-to-string (or (ignore-errors (sb-thread:mutex-name what))
                                           (type-of what))))))
  #-sbcl (progn thread nil))

(defun thread-debugger-condition (thread)
  "(values IN-DEBUGGER CONDITION) for THREAD: true when it sits in Swank's
or the implementation's debugger, and the condition it entered with."
  (flet ((in-thread (symbol)
           #+sbcl (multiple-value-bind (value ok)
                      (ignore-errors (sb-thread:symbol-value-in-thread symbol thread nil))
                    (if ok value nil))
           #-sbcl (progn symbol nil)))
    (let* ((swank-level (let ((s (find-symbol "*SLDB-LEVEL*" "SWANK")))
                          (and s (in-thread s))))
           (swank-condition (let ((s (find-symbol "*SWANK-DEBUGGER-CONDITION*" "SWANK")))
                              (and s (in-thread s))))
           (own #+sbcl (in-thread 'sb-debug::*debug-condition*) #-sbcl nil))
      (cond ((and (integerp swank-level) (plusp swank-level))
             (values t swank-condition))
            ((typep own 'condition) (values t own))
            (t (values nil nil))))))

(defun call-with-statistical-profile (thunk mode)
  "Call THUNK under the statistical profiler, sampling the current thread
only (MODE :CPU or :ALLOC). Returns (values THUNK-VALUES REPORT), REPORT
being (:stacks ((NAMES . COUNT) ...)) (the tables are computed from them,
`profile-tables'), NAMES a sampled stack's function names from root
to leaf, or (values NIL :UNSUPPORTED) where no profiler exists."
  #+sbcl
  (progn
    (sb-sprof:reset)
    (let ((vals nil))
      (unwind-protect
           (progn
             ;; :CPU samples through sb-sprof's :TIME clock: a timer thread
             ;; signals this thread alone every millisecond. sb-sprof's
             ;; :CPU mode arms the process-wide profiling timer, which fires
             ;; at the kernel's tick (4 ms here) on whichever thread runs,
             ;; and a sample landing on another thread is lost: a busy
             ;; image or a loaded machine left a few samples per second.
             (sb-sprof:start-profiling :mode (if (eq mode :alloc) :alloc :time)
                                       :sample-interval 0.001
                                       :max-samples 200000
                                       :threads (list sb-thread:*current-thread*))
             (setf vals (multiple-value-list (funcall thunk))))
        (sb-sprof:stop-profiling))
      ;; The report (its call graph unused) gathers the threads' samples
      ;; into the ones SAMPLED-STACKS reads.
      (sb-sprof:report :type nil)
      (values vals (list :stacks (sampled-stacks)))))
  #-sbcl (values (progn mode (multiple-value-list (funcall thunk))) :unsupported))

#+sbcl
(defun sampled-stacks ()
  "The stacks of the last profile's samples, each once with its count:
((NAMES . COUNT) ...), NAMES root first, named as sb-sprof's report names
them. Reads sb-sprof's samples (MAP-TRACES, and the internal walk over a
trace's program counters and node naming that its call graph uses)."
  (let ((counts (make-hash-table :test 'equal)))
    (sb-sprof::with-lookup-tables ()
      (sb-sprof:map-traces
       (lambda (thread trace)
         (declare (ignore thread))
         (let ((names '()))
           ;; The walk goes from the root to the leaf.
           (sb-sprof::map-trace-pc-locs
            (lambda (info pc-or-offset)
              (declare (ignore pc-or-offset))
              (let ((node (sb-sprof::lookup-node info)))
                (when node (push (sb-sprof::node-name node) names))))
            trace)
           (when names
             (incf (gethash (nreverse names) counts 0)))))
       sb-sprof::*samples*))
    (loop for names being the hash-keys of counts using (hash-value n)
          collect (cons names n))))

(defun closure-values (function)
  "The values a closure closed over (in the order the compiler keeps
them), or NIL for a function that is not a closure."
  #+sbcl (when (sb-kernel:closurep function)
           (loop for i below (1- (sb-kernel:get-closure-length function))
                 collect (let ((v (sb-kernel:%closure-index-ref function i)))
                           ;; A variable the closure assigns lives in a
                           ;; value cell: show the value.
                           (if (and (sb-kernel:%other-pointer-p v)
                                    (= (sb-kernel:widetag-of v) sb-vm:value-cell-widetag))
                               (sb-kernel:value-cell-ref v)
                               v))))
  #-sbcl (progn function nil))

(defun implementation-contrib-p (name)
  "Whether NAME (lower case) is a module the Lisp itself provides to
REQUIRE (SBCL's contribs: sb-posix, sb-rotate-byte, ...), which a project's
.asd must never shadow."
  #+sbcl (let ((home (ignore-errors (sb-int:sbcl-homedir-pathname))))
           (and home
                (some (lambda (type)
                        (probe-file (merge-pathnames
                                     (make-pathname :directory '(:relative "contrib")
                                                    :name name :type type)
                                     home)))
                      '("fasl" "asd"))
                t))
  #-sbcl (progn name nil))

(defun monotonic-microseconds ()
  "A clock in microseconds for durations (SBCL's internal real time is
coarse: milliseconds apart at best)."
  #+(and sbcl linux) (multiple-value-bind (seconds nanoseconds)
                         ;; 1: CLOCK_MONOTONIC
                         (sb-unix::clock-gettime 1)
                       (+ (* seconds 1000000) (floor nanoseconds 1000)))
  #-(and sbcl linux) (round (* 1000000 (get-internal-real-time))
                            internal-time-units-per-second))

;;; Coverage (asdf-test-system's coverage: true): SBCL's sb-cover, required
;;; when first asked for (not in the core: most sessions never measure).
;;; The one place that reads sb-cover's internals, by name at run time.

(defun coverage-unsupported-reason ()
  "NIL where this Lisp can measure coverage, else why not, naming the Lisp."
  #+sbcl (handler-case (progn (require :sb-cover) nil)
           (error (e) (format nil "SBCL could not load sb-cover: ~A" e)))
  #-sbcl (format nil "coverage needs SBCL's sb-cover; ~A ~A has no coverage tool ~
                      (run it in an SBCL image)"
                 (lisp-implementation-type) (lisp-implementation-version)))

(defun call-with-coverage-policy (thunk)
  "Call THUNK with code compiled in this thread instrumented for coverage
(the STORE-COVERAGE-DATA policy at 3), the global policy untouched: the
proclamation changes only this thread's binding of the policy."
  #+sbcl (let ((sb-c::*policy* sb-c::*policy*))
           (proclaim '(optimize (sb-c:store-coverage-data 3)))
           (funcall thunk))
  #-sbcl (funcall thunk))

(defun cover-call (name &rest args)
  "Call sb-cover's function NAME (loaded at run time, so not read here)."
  (apply (find-symbol name "SB-COVER") args))

(defun reset-coverage-data ()
  "Forget every coverage record and mark (sb-cover's RESET-COVERAGE and
CLEAR-COVERAGE), so a run counts only what it executed."
  #+sbcl (when (find-package "SB-COVER")
           (cover-call "RESET-COVERAGE")
           (cover-call "CLEAR-COVERAGE")))

(defun keep-coverage-marks ()
  "Copy the coverage marks of the code loaded so far into sb-cover's
records (its REFRESH-COVERAGE-INFO). A file's top-level forms run once
from code nothing keeps, and sb-cover forgets the marks of code the
collector frees: kept right after each file loads, they count."
  #+sbcl (when (find-package "SB-COVER")
           (cover-call "REFRESH-COVERAGE-INFO")))

(defvar *coverage-pages* nil
  "While COVERAGE-REPORT runs in a thread, a list (in a box) gathering the
per-file data sb-cover's report computes for each page it writes.")

#+sbcl
(defun capture-coverage-page (original html file counts states source)
  "Around sb-cover's PRINT-REPORT: keep FILE's COUNTS, STATES (the state of
each character of SOURCE as the page colours it) and SOURCE."
  (when *coverage-pages*
    (push (list file counts states source) (car *coverage-pages*)))
  (funcall original html file counts states source))

(defun coverage-line-kinds (states source)
  "The lines of SOURCE the report colours as not run: ((LINE KIND) ...),
KIND :NOT-EXECUTED where a non-blank character is in code never executed
(sb-cover's states 2, 10), else :ONE-BRANCH where a conditional took one
way only (states 6, 9). Lines are 1-based."
  (let ((lines '()) (line 1) (kind nil))
    (flet ((finish ()
             (when kind (push (list line kind) lines))
             (setf kind nil)))
      (loop for char across source
            for state across states
            do (cond ((char= char #\Newline) (finish) (incf line))
                     ((member char '(#\Space #\Tab)))
                     ((member state '(2 10)) (setf kind :not-executed))
                     ((and (member state '(6 9)) (null kind)) (setf kind :one-branch))))
      (finish))
    (nreverse lines)))

(defun coverage-report (directory files)
  "Write sb-cover's HTML report of FILES (truenames' namestrings) into
DIRECTORY and return (:index P :files ((:path P :expressions (COVERED
TOTAL) :branches (COVERED TOTAL) :lines ((LINE KIND) ...)) ...)), from the
data the report itself computes for each page (its PRINT-REPORT, wrapped
while it runs), so the lines named are the lines the pages colour."
  #+sbcl
  (let* ((print-report (find-symbol "PRINT-REPORT" "SB-COVER"))
         (ok (find-symbol "OK-OF" "SB-COVER"))
         (all (find-symbol "ALL-OF" "SB-COVER"))
         (*coverage-pages* (list nil))
         (wanted (lambda (file)
                   (let ((true (ignore-errors (namestring (truename file)))))
                     (and true (member true files :test #'string=) t)))))
    (unless (sb-int:encapsulated-p print-report 'cl-mcp-coverage)
      (sb-int:encapsulate print-report 'cl-mcp-coverage #'capture-coverage-page))
    ;; REPORT returns NIL when no file had data, having written an index
    ;; that says so: the index is the page written.
    (let ((index (let ((*error-output* (make-broadcast-stream)))
                   (cover-call "REPORT" directory :if-matches wanted)
                   (probe-file (merge-pathnames "cover-index.html" directory)))))
      (flet ((share (count) (list (funcall ok count) (funcall all count))))
        (list :index (and index (namestring index))
              :files (sort (loop for (file counts states source) in (car *coverage-pages*)
                                 collect (list :path (namestring (truename file))
                                               :expressions (share (getf counts :expression))
                                               :branches (share (getf counts :branch))
                                               :lines (coverage-line-kinds states source)))
                           #'string< :key #'second)))))
  #-sbcl (progn directory files (list :index nil :files nil)))
