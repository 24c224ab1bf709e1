(defpackage #:demo-ptester-green (:use #:cl #:ptester) (:export #:run))
(in-package #:demo-ptester-green)

(defun run ()
  (with-tests (:name "demo-ptester-green")
    (test 2 (+ 1 1))
    (test 1 (- 3 2))))
