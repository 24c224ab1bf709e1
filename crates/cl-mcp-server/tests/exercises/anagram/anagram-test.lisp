;; Ensures that anagram.lisp and the testing library are always loaded
(eval-when (:compile-toplevel :load-toplevel :execute)
  (load "anagram")
  (quicklisp-client:quickload :fiveam))

;; Defines the testing package with symbols from anagram and FiveAM in scope
;; The `run-tests` function is exported for use by both the user and test-runner
(defpackage :anagram-test
  (:use :cl :fiveam)
  (:export :run-tests))

;; Enter the testing package
(in-package :anagram-test)

;; Define and enter a new FiveAM test-suite
(def-suite* anagram-suite)

(test no-matches
  (is (equal '() (anagram:anagrams-for "diaper" '("hello" "world" "zombies" "pants")))))

(test detects-two-anagrams
  (is (equal '("stream" "maters")
             (anagram:anagrams-for "master" '("stream" "pigeon" "maters")))))

(test case-insensitive-anagrams
  (is (equal '("Carthorse")
             (anagram:anagrams-for "orchestra" '("cashregister" "Carthorse" "radishes")))))

(test words-are-not-their-own-anagrams
  (is (equal '() (anagram:anagrams-for "BANANA" '("BANANA")))))

(test words-other-than-themselves-can-be-anagrams
  (is (equal '("Silent") (anagram:anagrams-for "LISTEN" '("LISTEN" "Silent")))))

(defun run-tests (&optional (test-or-suite 'anagram-suite))
  "Provides human readable results of test run. Default to entire suite."
  (run! test-or-suite))
