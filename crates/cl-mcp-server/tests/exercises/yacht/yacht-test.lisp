;; Ensures that yacht.lisp and the testing library are always loaded
(eval-when (:compile-toplevel :load-toplevel :execute)
  (load "yacht")
  (ql:quickload :fiveam))

(defpackage :yacht-test
  (:use :cl :fiveam)
  (:export :run-tests))

(in-package :yacht-test)

(def-suite* yacht-suite)

(test yacht
  (is (= 50 (yacht:score '(5 5 5 5 5) :yacht))))

(test not-yacht
  (is (= 0 (yacht:score '(1 3 3 2 5) :yacht))))

(test ones
  (is (= 3 (yacht:score '(1 1 1 3 5) :ones))))

(test full-house-two-small-three-big
  (is (= 16 (yacht:score '(2 2 4 4 4) :full-house))))

(test two-pair-is-not-a-full-house
  (is (= 0 (yacht:score '(2 2 4 4 5) :full-house))))

(test choice
  (is (= 23 (yacht:score '(3 3 5 6 6) :choice))))

(defun run-tests (&optional (test-or-suite 'yacht-suite))
  (run! test-or-suite))
