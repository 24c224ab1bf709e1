(defpackage #:demo-ptester (:use #:cl #:ptester) (:export #:run))
(in-package #:demo-ptester)

(defun run ()
  (with-tests (:name "demo-ptester")
    (test 2 (+ 1 1))
    (test 5 (- 3 2))))
