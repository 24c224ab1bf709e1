(defpackage :yacht
  (:use :cl)
  (:export :score))
(in-package :yacht)

(defun score (dice category)
  "Wrong: a yacht scores 5, a full house is any pair."
  (case category
    (:ones (count 1 dice))
    (:yacht (if (every (lambda (d) (= d (first dice))) dice) 5 0))
    (:full-house (reduce #'+ dice))
    (:choice (reduce #'+ dice))
    (t 0)))
