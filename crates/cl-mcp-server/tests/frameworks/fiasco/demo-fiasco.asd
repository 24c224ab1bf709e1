;;; One passing and one failing Fiasco test; demo-fiasco/green passes.
(defsystem "demo-fiasco" :depends-on ("fiasco") :components ((:file "tests"))
  :perform (test-op (o c) (uiop:symbol-call :fiasco :run-package-tests :package :demo-fiasco)))
(defsystem "demo-fiasco/green" :depends-on ("fiasco") :components ((:file "green"))
  :perform (test-op (o c) (uiop:symbol-call :fiasco :run-package-tests :package :demo-fiasco-green)))
