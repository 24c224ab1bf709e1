;;;; package.lisp --- the package of cl-mcp-server's helpers in the image.
;;;;
;;;; Everything the Rust server calls lives here. The functions take plain
;;;; arguments (strings, numbers, keywords) and return plain data (plists,
;;;; lists of strings/numbers/keywords) that the server's data reader reads
;;;; back, so no object identity ever crosses the wire.

(defpackage #:cl-mcp-server
  (:use #:common-lisp)
  (:nicknames #:cl-mcp)
  (:export
   ;; eval.lisp
   #:eval-request
   #:interrupt-evaluation
   #:eval-status
   #:session-package
   #:image-info
   ;; introspect.lisp
   #:resolve-symbol
   #:find-definitions
   #:describe-symbol
   #:xref
   #:apropos-symbols
   #:macroexpand-form
   ;; build.lisp, systems.lisp, test-run.lisp
   #:compile-file-with-diagnostics
   #:load-asd-with-diagnostics
   #:load-system
   #:test-system
   #:list-systems
   ;; project.lisp
   #:register-project-root
   #:system-info
   #:source-directories
   #:package-info
   #:complete-names
   #:summarize-test-output
   ;; debug.lisp
   #:inspect-request
   #:trace-request
   #:profile-request
   #:thread-request))
