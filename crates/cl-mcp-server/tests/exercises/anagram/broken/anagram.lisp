(defpackage :anagram
  (:use :cl)
  (:export :anagrams-for))

(in-package :anagram)

(defun anagrams-for (subject candidates)
  "Wrong: case matters, and the subject itself is kept."
  (let ((key (sort (copy-seq subject) #'char<)))
    (remove-if-not (lambda (candidate)
                     (string= (sort (copy-seq candidate) #'char<) key))
                   candidates)))
