(defpackage #:demo-fiveam-green (:use #:cl #:fiveam))
(in-package #:demo-fiveam-green)

(def-suite :demo-fiveam-green)
(in-suite :demo-fiveam-green)

(test adds
  (is (= 2 (+ 1 1))))

(test subtracts
  (is (= 1 (- 3 2))))
