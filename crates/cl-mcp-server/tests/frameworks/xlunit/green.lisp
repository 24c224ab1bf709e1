(defpackage #:demo-xlunit-green (:use #:cl #:xlunit) (:export #:run))
(in-package #:demo-xlunit-green)

(defclass arithmetic (test-case) ())

(def-test-method adds ((test arithmetic) :run nil)
  (assert-equal 2 (+ 1 1)))

(def-test-method subtracts ((test arithmetic) :run nil)
  (assert-equal 1 (- 3 2)))

(defun run ()
  (textui-test-run (get-suite arithmetic)))
