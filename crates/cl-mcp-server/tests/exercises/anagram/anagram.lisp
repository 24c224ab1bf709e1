(defpackage :anagram
  (:use :cl)
  (:export :anagrams-for))

(in-package :anagram)

(defun normalize (word)
  (sort (string-downcase word) #'char<))

(defun anagrams-for (subject candidates)
  "The CANDIDATES that are anagrams of SUBJECT, not SUBJECT itself."
  (let ((key (normalize subject)))
    (remove-if-not (lambda (candidate)
                     (and (string/= (string-downcase candidate) (string-downcase subject))
                          (string= (normalize candidate) key)))
                   candidates)))
