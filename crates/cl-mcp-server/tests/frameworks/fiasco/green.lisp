(fiasco:define-test-package #:demo-fiasco-green)
(in-package #:demo-fiasco-green)

(deftest adds ()
  (is (= 2 (+ 1 1))))

(deftest subtracts ()
  (is (= 1 (- 3 2))))
