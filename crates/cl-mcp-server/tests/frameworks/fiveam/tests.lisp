(defpackage #:demo-fiveam (:use #:cl #:fiveam))
(in-package #:demo-fiveam)

(def-suite :demo-fiveam)
(in-suite :demo-fiveam)

(test adds
  (is (= 2 (+ 1 1)))
  (is (= 4 (+ 2 2))))

(test subtracts
  (is (= 1 (- 3 2)))
  (is (= 5 (- 3 2))))
