;;; One passing and one failing RT test; demo-rt/green passes.
(defsystem "demo-rt" :depends-on ("rt") :components ((:file "tests"))
  :perform (test-op (o c) (uiop:symbol-call :rt :do-tests)))
(defsystem "demo-rt/green" :depends-on ("rt") :components ((:file "green"))
  :perform (test-op (o c) (uiop:symbol-call :rt :do-tests)))
