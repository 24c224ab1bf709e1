;;; One passing and one failing xlunit test; demo-xlunit/green passes.
(defsystem "demo-xlunit" :depends-on ("xlunit") :components ((:file "tests"))
  :perform (test-op (o c) (uiop:symbol-call :demo-xlunit :run)))
(defsystem "demo-xlunit/green" :depends-on ("xlunit") :components ((:file "green"))
  :perform (test-op (o c) (uiop:symbol-call :demo-xlunit-green :run)))
