;;;; mixed.lisp
(in-package :cl-user)

;; adds
(defun a (x)
  (1+ x))

#+sbcl
(defun b () 2)

(defun c () "s
")
