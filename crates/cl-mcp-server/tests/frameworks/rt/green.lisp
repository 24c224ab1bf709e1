(defpackage #:demo-rt-green (:use #:cl #:regression-test))
(in-package #:demo-rt-green)

(rem-all-tests)

(deftest adds (+ 1 1) 2)

(deftest subtracts (- 3 2) 1)
