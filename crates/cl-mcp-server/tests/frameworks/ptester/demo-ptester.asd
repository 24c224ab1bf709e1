;;; One passing and one failing ptester check; demo-ptester/green passes.
(defsystem "demo-ptester" :depends-on ("ptester") :components ((:file "tests"))
  :perform (test-op (o c) (uiop:symbol-call :demo-ptester :run)))
(defsystem "demo-ptester/green" :depends-on ("ptester") :components ((:file "green"))
  :perform (test-op (o c) (uiop:symbol-call :demo-ptester-green :run)))
