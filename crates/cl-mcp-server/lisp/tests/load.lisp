;;;; tests/load.lisp --- load Swank and the helpers (in ORDER) into a fresh
;;;; SBCL, for the Lisp-side tests. Usage:
;;;;   sbcl --non-interactive --load tests/load.lisp
;;;; SWANK_LOADER overrides Debian's swank-loader path.

(defvar cl-user::*helpers-dir*
  (merge-pathnames "../" (make-pathname :name nil :type nil
                                        :defaults *load-truename*)))

(require "SB-POSIX")
(require "ASDF")
(let ((loader (or (sb-posix:getenv "SWANK_LOADER")
                  "/usr/share/common-lisp/source/slime/swank-loader.lisp")))
  (let ((*standard-output* (make-broadcast-stream))
        (*error-output* (make-broadcast-stream)))
    (load loader)
    (funcall (find-symbol "INIT" "SWANK-LOADER") :load-contribs nil :setup t)))

(defun cl-user::helper-files ()
  (with-open-file (in (merge-pathnames "ORDER" cl-user::*helpers-dir*))
    (loop for line = (read-line in nil)
          while line
          for trimmed = (string-trim " 	" line)
          unless (or (string= trimmed "") (char= (char trimmed 0) #\#))
            collect (merge-pathnames trimmed cl-user::*helpers-dir*))))

;; Compile each file so that its warnings show up; a full WARNING is a bug.
(dolist (file (cl-user::helper-files))
  (multiple-value-bind (fasl warnings-p failure-p)
      (let ((*compile-verbose* nil) (*compile-print* nil))
        (compile-file file :output-file (merge-pathnames
                                         (format nil "cl-mcp-test-~A.fasl" (pathname-name file))
                                         (uiop:temporary-directory))))
    (declare (ignore warnings-p))
    (when failure-p
      (format *error-output* "~&FAILED to compile ~A~%" file)
      (sb-ext:exit :code 2 :abort t))
    (load fasl)))
