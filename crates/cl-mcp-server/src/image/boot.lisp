;;;; boot.lisp --- how a local image started by cl-mcp-server brings up Swank.
;;;;
;;;; Loaded after Swank and the helpers (into the cached core, or at start
;;;; when no core could be built). The server then runs (cl-mcp-boot:main).
;;;; Owned by the image supervisor (crates/cl-mcp-server/src/image/).
;;;;
;;;; What the image is told, and how:
;;;; - CL_MCP_SWANK_SECRET (environment): the per-image Swank secret. The
;;;;   environment is readable only by the same user (/proc/PID/environ is
;;;;   0400), unlike the command line. It is removed from the environment once
;;;;   read so programs started from the image do not inherit it.
;;;; - The port: Swank binds 127.0.0.1 port 0 (the OS picks), and MAIN prints
;;;;   "CL-MCP-SWANK-PORT <n>" on stdout, which the server reads. Helpers can
;;;;   read it from CL-MCP-BOOT:*SWANK-PORT*. An image started by an
;;;;   --image-launcher elsewhere (a network namespace, a pod) is told where
;;;;   to listen instead: CL_MCP_SWANK_INTERFACE (an address of its host,
;;;;   0.0.0.0 for all) and CL_MCP_SWANK_PORT (a fixed port); the secret
;;;;   still guards the one connection Swank accepts.
;;;; - Lifetime: the server holds the image's stdin open; when the server
;;;;   exits (even by kill -9) stdin reaches end-of-file and the image exits.
;;;;   A Lisp without threads (CLISP) serves Swank on its one thread instead
;;;;   and exits when the server's connection closes.
;;;; - CL_MCP_FASL_DIR (environment): the project's fasl directory in the
;;;;   server's cache; ASDF's output goes under its asdf/ (see
;;;;   USE-PROJECT-FASL-DIRECTORY).
;;;; - CL_MCP_CACHE_CHECK=1 (environment): the server checking a cache it
;;;;   has just built; MAIN checks that Swank, the helpers and itself are in
;;;;   place, prints "CL-MCP-CACHE-OK" and exits, starting nothing.
;;;;
;;;; Implementation specifics (environment, exit, the process's own streams,
;;;; TCP_NODELAY) are behind reader conditionals here, one branch per Lisp
;;;; the supervisor knows (src/image/implementation.rs).

;; The package, GETENV and EXIT-NOW are prelude.lisp's, loaded first.
(in-package #:cl-mcp-boot)

(defvar *swank-port* nil
  "The port this image's Swank server listens on (127.0.0.1 only).")

(defvar *main-thread* nil
  "The thread that runs MAIN: it waits on the server's lifeline, and its
end (killed, or aborted out of a debugger) is the image's. The helpers
refuse to kill or interrupt it.")

(defun unsetenv (name)
  #+sbcl (sb-alien:alien-funcall
          (sb-alien:extern-alien "unsetenv" (function sb-alien:int sb-alien:c-string))
          name)
  #+ecl (ext:setenv name nil)
  #+clisp (setf (ext:getenv name) nil)
  #+ccl (ccl:unsetenv name)
  ;; ABCL cannot change the JVM's environment; programs it starts get
  ;; their environment from Java's ProcessBuilder, which copies it.
  #-(or sbcl ecl clisp ccl) (progn name nil))

(defun process-stdin ()
  "The process's own standard input (the server's lifeline), whatever the
standard streams are bound to."
  #+sbcl sb-sys:*stdin*
  #+ecl ext:+process-standard-input+
  ;; CLISP: its own terminal stream (a fresh EXT:MAKE-STREAM on fd 0 or 1
  ;; would be a second stream object on the same descriptor).
  #+clisp (let ((s *terminal-io*)) (if (typep s 'two-way-stream) (two-way-stream-input-stream s) s))
  #+ccl ccl::*stdin*
  #-(or sbcl ecl clisp ccl) *standard-input*)

(defun process-stdout ()
  #+sbcl sb-sys:*stdout*
  #+ecl ext:+process-standard-output+
  #+clisp (let ((s *terminal-io*)) (if (typep s 'two-way-stream) (two-way-stream-output-stream s) s))
  #+ccl ccl::*stdout*
  #-(or sbcl ecl clisp ccl) *standard-output*)

(defun threads-p ()
  "Whether Swank can spawn threads here (its :SPAWN style)."
  (eq (swank/backend:preferred-communication-style) :spawn))

(defun take-secret ()
  (let ((secret (getenv "CL_MCP_SWANK_SECRET")))
    (unsetenv "CL_MCP_SWANK_SECRET")
    secret))

(defun install-tcp-nodelay ()
  "Swank 2.27 leaves Nagle's algorithm on for its connection: every reply
would wait up to 40 ms for an ACK. Wrap its accept to set TCP_NODELAY where
the backend accepts through sb-bsd-sockets (SBCL, ECL)."
  (let ((accept (find-symbol "ACCEPT" #+sbcl "SWANK/SBCL" #+ecl "SWANK/ECL"
                                      #-(or sbcl ecl) "SWANK"))
        (nodelay (and (find-package "SB-BSD-SOCKETS")
                      (find-symbol "SOCKOPT-TCP-NODELAY" "SB-BSD-SOCKETS"))))
    (when (and accept nodelay (fboundp accept)
               (not (get accept 'nodelay-installed)))
      (let ((old (fdefinition accept))
            (setter (ignore-errors (fdefinition (list 'setf nodelay)))))
        (setf (fdefinition accept)
              (lambda (socket)
                (let ((client (funcall old socket)))
                  (when setter (ignore-errors (funcall setter t client)))
                  client)))
        (setf (get accept 'nodelay-installed) t)))))

(defun swank-interface ()
  "Where Swank listens: CL_MCP_SWANK_INTERFACE, else loopback."
  (let ((interface (getenv "CL_MCP_SWANK_INTERFACE")))
    (if (and interface (plusp (length interface))) interface "127.0.0.1")))

(defun swank-port ()
  "The port Swank binds: CL_MCP_SWANK_PORT, else 0 (the OS picks)."
  (let ((port (getenv "CL_MCP_SWANK_PORT")))
    (or (and port (ignore-errors (parse-integer port))) 0)))

(defun refuse-strangers ()
  "A connection to Swank that does not know the secret is closed at once and
its thread ended (Swank would leave it in the debugger, the connection open,
the server waiting for an answer that never comes). Swank then listens no
more: it accepts one connection. Where the thread has no ABORT restart,
Swank's own behaviour stands."
  (let ((auth 'swank::authenticate-client))
    (when (and (fboundp auth) (not (get auth 'refusal-installed)))
      (let ((old (fdefinition auth)))
        (setf (fdefinition auth)
              (lambda (stream)
                (handler-bind
                    ((error (lambda (e)
                              (let ((abort (find-restart 'abort)))
                                (when abort
                                  (format (process-stderr)
                                          "~&cl-mcp-boot: refused a Swank connection: ~A~%"
                                          (safe-text e))
                                  (finish-output (process-stderr))
                                  (ignore-errors (close stream :abort t))
                                  (invoke-restart abort))))))
                  (funcall old stream))))
        (setf (get auth 'refusal-installed) t)))))

(defun exit-when-swank-cannot-start-threads ()
  "Swank's listener makes the connection's control thread, and that makes
the reader and indentation threads, with no handler around: a thread that
cannot be made (the image at its process and thread limit) went to the
debugger there, where it waited for a terminal forever, the connection open
and no request ever answered. Such an image can serve nothing: say why on
stderr (the server reports the Lisp's last words) and exit."
  (dolist (name '(swank::spawn-threads-for-connection swank::control-thread))
    (when (and (fboundp name) (not (get name 'thread-failure-exits)))
      (let ((old (fdefinition name))
            (what (if (eq name 'swank::control-thread)
                      "its reader and indentation threads"
                      "its control thread")))
        (setf (fdefinition name)
              (lambda (&rest args)
                ;; Swank's dispatch loop handles its own errors (its panic
                ;; handler closes the connection): only what fails before
                ;; it reaches this handler.
                (handler-bind
                    ((error (lambda (e)
                              (format (process-stderr)
                                      "~&cl-mcp-boot: Swank cannot start ~A (~A): the image is at ~
                                       its limit of processes and threads (--max-processes, or the ~
                                       user's RLIMIT_NPROC); exiting~%"
                                      what (safe-text e))
                              (finish-output (process-stderr))
                              (exit-now 3))))
                  (apply old args))))
        (setf (get name 'thread-failure-exits) t)))))

(defun announce (port)
  (setf *swank-port* port)
  (let ((out (process-stdout)))
    (format out "~&CL-MCP-SWANK-PORT ~D~%" port)
    (finish-output out)))

(defun check-and-exit ()
  "The server's check of a freshly built cache: everything in place, say
so, exit. The boot guard still stands, so a failure says why and exits 3."
  (check-cache)
  (let ((out (process-stdout)))
    (format out "~&CL-MCP-CACHE-OK~%")
    (finish-output out))
  (exit-now 0))

(defvar *exit-code* nil
  "The code an evaluation passed to EXT:EXIT (or QUIT, BYE) on CLISP, whose
exit unwinds Swank's loop as a reset does: MAIN's cleanup then lets the
exit go on instead of reporting a stack overflow.")

#+clisp
(defun note-exit-calls ()
  "Wrap CLISP's EXIT, QUIT and BYE (one function) so MAIN can tell an exit
asked for from a reset past Swank."
  (let ((exit (fdefinition 'ext:exit)))
    (unless (get 'ext:exit 'exit-noted)
      (ext:without-package-lock ("EXT")
        (dolist (name '(ext:exit ext:quit ext:bye))
          (setf (fdefinition name)
                (lambda (&optional (code 0 code-p))
                  (setf *exit-code* (if code-p code 0))
                  (if code-p (funcall exit code) (funcall exit))))))
      ;; C's _exit, for MAIN's cleanup: CLISP's own exit, once Swank's
      ;; loop is unwound, does not finish (the image would wait until the
      ;; server kills it, and its code would be lost).
      (eval '(ffi:def-call-out c-exit (:name "_exit") (:arguments (code ffi:int))
              (:return-type nil) (:language :stdc) (:library :default)))
      (setf (get 'ext:exit 'exit-noted) t))))

(defun use-project-fasl-directory ()
  "ASDF's compiled files go to CL_MCP_FASL_DIR's asdf/ (the project's fasl
directory in the server's cache, the one place there the image may write)
instead of the user's shared ~/.cache/common-lisp/, which every Lisp of the
user loads from: what an image compiles can then only reach later images of
its own project. Ahead of the user's own translations."
  (let ((dir (getenv "CL_MCP_FASL_DIR"))
        (init (and (find-package "ASDF")
                   (find-symbol "INITIALIZE-OUTPUT-TRANSLATIONS" "ASDF"))))
    (when (and dir (plusp (length dir)) init (fboundp init))
      (let ((base (concatenate 'string (string-right-trim "/" dir) "/asdf/")))
        (funcall init `(:output-translations
                        (t (,base :implementation :**/ :*.*.*))
                        :inherit-configuration))))))

(defun main ()
  (utf-8-defaults)
  (when (equal (getenv "CL_MCP_CACHE_CHECK") "1")
    (check-and-exit))
  (end-boot-guard)
  (setf *main-thread* (swank/backend:current-thread))
  (let ((stdin (process-stdin))
        (threads nil))
    (handler-case
        (let ((secret (take-secret)))
          (unless (and secret (plusp (length secret)))
            (error "CL_MCP_SWANK_SECRET is not set"))
          ;; Swank reads its secret through this function (normally from
          ;; ~/.slime-secret); answering from memory leaves the home alone.
          (setf (fdefinition 'swank::slime-secret) (lambda () secret))
          (install-tcp-nodelay)
          ;; A cached core carries the ASDF configuration of the moment it
          ;; was saved; forget it so CL_SOURCE_REGISTRY,
          ;; ASDF_OUTPUT_TRANSLATIONS and ~/.config/common-lisp/ are read
          ;; afresh at first use.
          (let ((clear (and (find-package "ASDF")
                            (find-symbol "CLEAR-CONFIGURATION" "ASDF"))))
            (when (and clear (fboundp clear))
              (funcall clear)))
          (use-project-fasl-directory)
          (setf threads (threads-p))
          ;; The process's stdin is the server's lifeline (see above), not
          ;; input for programs: code reading the default streams gets
          ;; end-of-file at once instead of blocking on that pipe. (Without
          ;; threads Swank's loop itself waits on stdin beside the
          ;; connection, and ends at its end-of-file; evaluations bind
          ;; their own empty input.)
          (if threads
              (setf *standard-input* (make-concatenated-stream)
                    *terminal-io* (make-two-way-stream (make-concatenated-stream)
                                                       (process-stdout)))
              (setf *standard-input* stdin))
          ;; ABCL: JSS's class index and ABCL-INTROSPECT's annotations,
          ;; held back during the start, are made on a thread of its own
          ;; (prelude.lisp); JSS's lookups wait for the index from before
          ;; Swank serves the first request.
          #+abcl (finish-backend-modules)
          (when threads
            (refuse-strangers)
            (exit-when-swank-cannot-start-threads)
            (let ((swank::*loopback-interface* (swank-interface)))
              (swank::setup-server (swank-port) #'announce :spawn nil nil))))
      (error (e)
        (format (process-stderr) "~&cl-mcp-boot: cannot start Swank: ~A~%" (safe-text e))
        (finish-output (process-stderr))
        (exit-now 3)))
    (if threads
        (loop until (eq (read-char stdin nil :eof) :eof))
        ;; No threads: serve the one connection on this thread; the server
        ;; closing it (or dying) ends the image. A CLISP stack overflow is
        ;; no condition but a RESET that unwinds everything, Swank's loop
        ;; included: the image then exits, saying why, and the server
        ;; reports the death (a fresh image follows) instead of a wedged one.
        (let ((swank::*loopback-interface* (swank-interface))
              (done nil))
          #+clisp (note-exit-calls)
          (unwind-protect
               (progn (swank::setup-server (swank-port) #'announce nil nil nil)
                      (setf done t))
            (cond (done)
                  (*exit-code*
                   ;; An evaluation called EXIT: it goes on with its code.
                   (format (process-stderr) "~&cl-mcp-boot: the image exits with code ~A (EXIT called)~%"
                           *exit-code*)
                   (finish-output (process-stderr))
                   (ignore-errors (finish-output (process-stdout)))
                   #+clisp (funcall 'c-exit (if (integerp *exit-code*) *exit-code* 0)))
                  (t
                   (format (process-stderr) "~&cl-mcp-boot: the Lisp reset past Swank (stack overflow)~%")
                   (finish-output (process-stderr))
                   (exit-now 70))))))
    (exit-now 0)))
