(defpackage :leap
  (:use :cl)
  (:export :leap-year-p))
(in-package :leap)

(defun leap-year-p (year)
  (flet ((divides (n) (zerop (mod year n))))
    (and (divides 4) (or (not (divides 100)) (divides 400)))))
