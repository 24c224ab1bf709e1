;; Ensures that leap.lisp and the testing library are always loaded
(eval-when (:compile-toplevel :load-toplevel :execute)
  (load "leap")
  (ql:quickload :fiveam))

;; Defines the testing package with symbols from leap and FiveAM in scope
(defpackage :leap-test
  (:use :cl :fiveam)
  (:export :run-tests))

(in-package :leap-test)

(def-suite* leap-suite)

(test year-not-divisible-by-4-in-common-year
  (is (not (leap:leap-year-p 2015))))

(test year-divisible-by-4-not-divisible-by-100-in-leap-year
  (is (leap:leap-year-p 1996)))

(test year-divisible-by-100-not-divisible-by-400-in-common-year
  (is (not (leap:leap-year-p 2100))))

(test year-divisible-by-400-in-leap-year
  (is (leap:leap-year-p 2000)))

(test year-divisible-by-200-not-divisible-by-400-in-common-year
  (is (not (leap:leap-year-p 1800))))

(defun run-tests (&optional (test-or-suite 'leap-suite))
  (run! test-or-suite))
