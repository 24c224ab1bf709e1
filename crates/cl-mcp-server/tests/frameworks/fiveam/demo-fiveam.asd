;;; One passing and one failing FiveAM test; demo-fiveam/green passes.
(defsystem "demo-fiveam" :depends-on ("fiveam") :components ((:file "tests"))
  :perform (test-op (o c) (uiop:symbol-call :fiveam :run! :demo-fiveam)))
(defsystem "demo-fiveam/green" :depends-on ("fiveam") :components ((:file "green"))
  :perform (test-op (o c) (uiop:symbol-call :fiveam :run! :demo-fiveam-green)))
