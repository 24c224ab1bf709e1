(defpackage #:demo-xlunit (:use #:cl #:xlunit) (:export #:run))
(in-package #:demo-xlunit)

(defclass arithmetic (test-case) ())

(def-test-method adds ((test arithmetic) :run nil)
  (assert-equal 2 (+ 1 1)))

(def-test-method subtracts ((test arithmetic) :run nil)
  (assert-equal 5 (- 3 2)))

(defun run ()
  (textui-test-run (get-suite arithmetic)))
