(defpackage #:demo-rt (:use #:cl #:regression-test))
(in-package #:demo-rt)

(rem-all-tests)

(deftest adds (+ 1 1) 2)

(deftest subtracts (- 3 2) 5)
