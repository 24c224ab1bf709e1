;;;; tests/portable-smoke.lisp --- load Swank and the helpers into a Lisp
;;;; other than SBCL (ECL here) and check that the portable layer works:
;;;; evaluation with values and errors, describe, apropos, package info.
;;;; Prints "PORTABLE-SMOKE OK" at the end, or the first failure.
;;;; Usage: ecl --norc --load tests/portable-smoke.lisp

(require "asdf")
(defvar cl-user::*helpers-dir*
  (make-pathname :name nil :type nil :version nil
                 :defaults (merge-pathnames "../" (make-pathname :name nil :type nil
                                                                 :defaults *load-truename*))))
(let ((*standard-output* (make-broadcast-stream)))
  (load "/usr/share/common-lisp/source/slime/swank-loader.lisp")
  (funcall (find-symbol "INIT" "SWANK-LOADER") :load-contribs nil :setup t))
(with-open-file (in (merge-pathnames "ORDER" cl-user::*helpers-dir*))
  (loop for line = (read-line in nil) while line
        for f = (string-trim " 	" line)
        unless (or (string= f "") (char= (char f 0) #\#))
          do (let ((*standard-output* (make-broadcast-stream)))
               (load (merge-pathnames f cl-user::*helpers-dir*)))))

(defun cl-user::check (what ok)
  (unless ok
    (format t "~&PORTABLE-SMOKE FAILED: ~A~%" what)
    (finish-output)
    (ext:quit 1)))

(let ((r (cl-mcp:eval-request "(values (+ 1 2) :x)")))
  (cl-user::check "values" (equal (getf r :values) '("3" ":X"))))
(let ((r (cl-mcp:eval-request "(princ \"hi\") (/ 1 0)")))
  (cl-user::check "stdout before an error" (equal (getf r :stdout) "hi"))
  (cl-user::check "error type" (equal (getf (getf r :error) :type) "DIVISION-BY-ZERO")))
(let ((r (cl-mcp:eval-request "(defpackage :smoke (:use :cl)) (in-package :smoke) (defun f () 1)" :session "s")))
  (cl-user::check "in-package persists" (equal (getf r :package) "SMOKE")))
(let ((r (cl-mcp:eval-request "(read-line)")))
  (cl-user::check "read without stdin ends at once" (getf r :error)))
(let ((r (cl-mcp:describe-symbol "mapcar")))
  (cl-user::check "describe" (member "function" (getf r :kinds) :test #'string=)))
(let ((r (cl-mcp:apropos-symbols "mapcan" :package "CL")))
  (cl-user::check "apropos" (plusp (getf r :count))))
(let ((r (cl-mcp:package-info "COMMON-LISP-USER")))
  (cl-user::check "package-info" (equal (getf r :name) "COMMON-LISP-USER")))
(format t "~&PORTABLE-SMOKE OK~%")
(finish-output)
(ext:quit 0)
