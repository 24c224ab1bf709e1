(fiasco:define-test-package #:demo-fiasco)
(in-package #:demo-fiasco)

(deftest adds ()
  (is (= 2 (+ 1 1)))
  (is (= 4 (+ 2 2))))

(deftest subtracts ()
  (is (= 1 (- 3 2)))
  (is (= 5 (- 3 2))))
