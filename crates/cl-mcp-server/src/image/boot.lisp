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
;;;;   read it from CL-MCP-BOOT:*SWANK-PORT*.
;;;; - Lifetime: the server holds the image's stdin open; when the server
;;;;   exits (even by kill -9) stdin reaches end-of-file and the image exits.

(defpackage #:cl-mcp-boot
  (:use #:common-lisp)
  (:export #:main #:*swank-port*))

(in-package #:cl-mcp-boot)

(defvar *swank-port* nil
  "The port this image's Swank server listens on (127.0.0.1 only).")

(defun take-secret ()
  (let ((secret (sb-ext:posix-getenv "CL_MCP_SWANK_SECRET")))
    (sb-alien:alien-funcall
     (sb-alien:extern-alien "unsetenv" (function sb-alien:int sb-alien:c-string))
     "CL_MCP_SWANK_SECRET")
    secret))

(defun install-tcp-nodelay ()
  "Swank 2.27 leaves Nagle's algorithm on for its connection: every reply
would wait up to 40 ms for an ACK. Wrap its accept to set TCP_NODELAY."
  (unless (get 'swank/sbcl::accept 'nodelay-installed)
    (let ((accept (fdefinition 'swank/sbcl::accept)))
      (setf (fdefinition 'swank/sbcl::accept)
            (lambda (socket)
              (let ((client (funcall accept socket)))
                (ignore-errors
                 (setf (sb-bsd-sockets:sockopt-tcp-nodelay client) t))
                client)))
      (setf (get 'swank/sbcl::accept 'nodelay-installed) t))))

(defun main ()
  (handler-case
      (let ((secret (take-secret)))
        (unless (and secret (plusp (length secret)))
          (error "CL_MCP_SWANK_SECRET is not set"))
        ;; Swank reads its secret through this function (normally from
        ;; ~/.slime-secret); answering from memory leaves the home alone.
        (setf (fdefinition 'swank::slime-secret) (lambda () secret))
        (install-tcp-nodelay)
        ;; A cached core carries the ASDF configuration of the moment it was
        ;; saved; forget it so CL_SOURCE_REGISTRY, ASDF_OUTPUT_TRANSLATIONS
        ;; and ~/.config/common-lisp/ are read afresh at first use.
        (let ((clear (and (find-package "ASDF")
                          (find-symbol "CLEAR-CONFIGURATION" "ASDF"))))
          (when (and clear (fboundp clear))
            (funcall clear)))
        ;; The process's stdin is the server's lifeline (see above), not
        ;; input for programs: code reading the default streams gets
        ;; end-of-file at once instead of blocking on that pipe.
        (setf *standard-input* (make-concatenated-stream)
              *terminal-io* (make-two-way-stream (make-concatenated-stream)
                                                 sb-sys:*stdout*))
        (setf *swank-port*
              (swank:create-server :port 0 :interface "127.0.0.1"
                                   :style :spawn :dont-close nil))
        (format t "~&CL-MCP-SWANK-PORT ~D~%" *swank-port*)
        (finish-output))
    (error (e)
      (format *error-output* "~&cl-mcp-boot: cannot start Swank: ~A~%" e)
      (finish-output *error-output*)
      (sb-ext:exit :code 3 :abort t)))
  (loop until (eq (read-char sb-sys:*stdin* nil :eof) :eof))
  (sb-ext:exit :code 0 :abort t))
