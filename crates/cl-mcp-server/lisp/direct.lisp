;;;; direct.lisp --- the evaluation channel: evaluate-lisp's requests
;;;; without Swank's dispatch.
;;;;
;;;; Through Swank, one request to a worker thread passes Swank's reader
;;;; thread, its control thread, the worker, and the control thread again
;;;; (which writes the reply): four thread hand-offs, the larger part of a
;;;; warm round trip. The server's persistent evaluation thread instead
;;;; reads its requests itself from a second socket (opened by
;;;; START-DIRECT-CHANNEL, which Swank calls, and guarded by a one-time
;;;; token the server sends first: an abstract Unix socket where the Lisp
;;;; can open one, else loopback TCP) and writes each reply itself. Framing
;;;; and printing are Swank's (6 hex digits of UTF-8 length, then the
;;;; message), so the server reads both channels alike. Swank stays for
;;;; everything else: other helpers, interrupts, status polls, the
;;;; debugger, attach mode.
;;;;
;;;; A request is (PACKAGE-NAME FORM), read in Swank's I/O package; the
;;;; reply is (:ok VALUE) or (:abort REASON), as Swank's :return would be.

(in-package #:cl-mcp-server)

(defun direct-eval (packet)
  "Read and evaluate one request packet as Swank's EVAL-FOR-EMACS would
(buffer package and readtable, Swank's interrupts enabled during the
evaluation, errors to Swank's debugger, whose quit restart ends this
request); the reply message."
  (let ((condition nil))
    (restart-case
        (destructuring-bind (package-name form)
            (swank/rpc::read-form packet swank::*swank-io-package*)
          (let ((swank::*buffer-package* (swank::guess-buffer-package package-name))
                (swank::*buffer-readtable* (swank::guess-buffer-readtable package-name))
                (swank::*sldb-quit-restart* (find-restart 'abort)))
            (handler-bind ((t (lambda (c) (setf condition c))))
              (list :ok (swank::with-slime-interrupts (eval form))))))
      (abort ()
        :report "Return to cl-mcp's evaluation loop."
        (list :abort (and condition
                          (ignore-errors (prin1-to-string condition))))))))

(defun direct-channel-loop (stream connection)
  "Serve requests on STREAM until it closes, in the context a Swank worker
has for CONNECTION (its streams, debugger hook and interrupts)."
  (unwind-protect
       (swank::with-connection (connection)
         (loop
           (let ((packet (handler-case (swank/rpc::read-packet stream)
                           (error () (return)))))
             (unless (ignore-errors
                      (swank::without-slime-interrupts
                        (swank/rpc::write-message (direct-eval packet)
                                                  swank::*swank-io-package* stream))
                      t)
               (return)))))
    (ignore-errors (close stream))))

(defun start-direct-channel (token &key (name "cl-mcp-eval") local)
  "Listen for the server's evaluation channel and start the thread that
serves it: on the abstract Unix socket LOCAL where it is given and this Lisp
can open one (OPEN-LOCAL-LISTENER), else on a loopback TCP port. The first
connection that sends TOKEN (as one framed message) is served; others are
closed. Returns (ADDRESS THREAD-ID): ADDRESS is LOCAL, or the port."
  (let* ((local-listener (and local (open-local-listener local)))
         (socket (or local-listener (swank/backend:create-socket "127.0.0.1" 0)))
         (address (if local-listener local (swank/backend:local-port socket)))
         (connection swank::*emacs-connection*)
         (thread
           (swank/backend:spawn
            (lambda ()
              (swank::with-bindings swank::*default-worker-thread-bindings*
                (let ((stream
                        (unwind-protect
                             (loop
                               (let ((s (if local-listener
                                            (accept-local-connection socket)
                                            (swank/backend:accept-connection
                                             socket :external-format nil :buffering t))))
                                 (if (equal (ignore-errors (swank/rpc::read-packet s)) token)
                                     (return s)
                                     (ignore-errors (close s)))))
                          (ignore-errors
                           (if local-listener
                               (close-local-listener socket)
                               (swank/backend:close-socket socket))))))
                  (swank/rpc::write-message '(:ready) swank::*swank-io-package* stream)
                  (direct-channel-loop stream connection))))
            :name name)))
    (list address (swank/backend:thread-id thread))))
