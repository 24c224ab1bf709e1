;;;; tests/run.lisp --- Lisp-side tests of the helpers, in a fresh SBCL with
;;;; Swank loaded but no connection. Exit code 0 when all pass, 1 otherwise.
;;;;   sbcl --non-interactive --load tests/load.lisp --load tests/run.lisp

(defpackage #:cl-mcp-server-tests
  (:use #:cl))

(in-package #:cl-mcp-server-tests)

(defvar *failures* 0)
(defvar *checks* 0)

(defmacro check (description form)
  `(let ((ok (handler-case ,form
               (error (e) (format t "~&  error in check: ~A~%" e) nil))))
     (incf *checks*)
     (unless ok
       (incf *failures*)
       (format t "~&FAIL: ~A~%  ~S~%" ,description ',form))))

(defun ev (code &rest args)
  (apply #'cl-mcp:eval-request code args))

(defun in-thread (function)
  (sb-thread:make-thread function :name "cl-mcp test evaluation"))

(defvar *fixture*
  (truename (merge-pathnames "tests/fixture/" cl-user::*helpers-dir*)))

(defun fixture (name) (namestring (merge-pathnames name *fixture*)))

(defun has (substring string)
  (and (stringp string) (search substring string)))

;;; Finding forms in source text: comments and strings are not code.

(let ((text (format nil "#|~%(test ghost)~%|#~%(defvar *s* \"~%(defun fake ()\")~%~
                         ;; (test commented)~%(print #\\()~%(test real~%  (is (= 1 2)))~%")))
  (check "defining-forms skips comments, strings and characters"
         (equal (mapcar #'car (cl-mcp::defining-forms text '("test" "defun")))
                '("real"))))

;;; Evaluation

(let ((r (ev "(+ 1 2)")))
  (check "(+ 1 2) => 3" (equal (getf r :values) '("3")))
  (check "no error" (null (getf r :error)))
  (check "package reported" (equal (getf r :package) "COMMON-LISP-USER")))

(check "multiple values" (equal (getf (ev "(values 1 :two \"3\")") :values)
                                '("1" ":TWO" "\"3\"")))
(check "no values" (equal (getf (ev "(values)") :values) '()))
(check "only the last form's values"
       (equal (getf (ev "(defvar *x* 1) (+ *x* 1)") :values) '("2")))

(let ((r (ev "(defpackage :cl-mcp-test-pkg (:use :cl)) (in-package :cl-mcp-test-pkg) (defun here () *package*) (package-name (here))")))
  (check "in-package mid-code" (equal (getf r :values) '("\"CL-MCP-TEST-PKG\"")))
  (check "package returned" (equal (getf r :package) "CL-MCP-TEST-PKG")))
(check "package persists" (equal (getf (ev "(package-name *package*)") :values)
                                 '("\"CL-MCP-TEST-PKG\"")))
(check "explicit package wins" (equal (getf (ev "(package-name *package*)" :package "cl-user") :values)
                                      '("\"COMMON-LISP-USER\"")))
(check "a per-call package does not stick"
       (equal (getf (ev "(package-name *package*)") :values) '("\"CL-MCP-TEST-PKG\"")))
(check "a per-call package with in-package sticks"
       (and (equal (getf (ev "(cl:in-package :cl-user)" :package "keyword") :package) "COMMON-LISP-USER")
            (equal (getf (ev "(package-name *package*)") :values) '("\"COMMON-LISP-USER\""))))
(check "sessions keep their own package"
       (equal (getf (ev "(package-name *package*)" :session "other") :values)
              '("\"COMMON-LISP-USER\"")))
(check "unknown package argument"
       (has "No package" (getf (getf (ev "1" :package "no-such-pkg") :error) :message)))

(let ((r (ev "(progn (princ \"out\") (format *error-output* \"err\") (warn \"careful\") 5)")))
  (check "stdout captured" (equal (getf r :stdout) "out"))
  (check "stderr captured" (equal (getf r :stderr) "err"))
  (check "runtime warning collected" (equal (getf r :warnings) '("SIMPLE-WARNING: careful")))
  (check "value after output" (equal (getf r :values) '("5"))))

(let ((r (ev "(defun uses-undefined () (cl-mcp-nowhere-fn))")))
  (check "compiler style-warning collected"
         (some (lambda (w) (has "CL-MCP-NOWHERE-FN" w)) (getf r :warnings))))
(let ((r (ev "(defun uses-undefined-2 () (cl-mcp-nowhere-fn-2)) (error \"later\")")))
  (check "deferred warnings survive a later error in the same call"
         (and (some (lambda (w) (has "CL-MCP-NOWHERE-FN-2" w)) (getf r :warnings))
              (has "later" (getf (getf r :error) :message))
              (null (getf r :values)))))
(check "forward reference in one call: no warning"
       (null (getf (ev "(defun fwd-a () (fwd-b)) (defun fwd-b () 1) (fwd-a)") :warnings)))
(check "redefinition is not a warning"
       (null (getf (ev "(defun fwd-b () 2)") :warnings)))

(let* ((r (ev "(/ 1 0)" :package "CL-USER"))
       (e (getf r :error)))
  (check "division error type" (equal (getf e :type) "DIVISION-BY-ZERO"))
  (check "division error message" (has "DIVISION-BY-ZERO" (getf e :message)))
  (check "backtrace starts at the user's call"
         (equal (first (getf e :backtrace)) '(0 "(/ 1 0)")))
  (check "no values on error" (null (getf r :values))))

(let* ((r (ev "(defun cl-mcp-f1 (x) (1+ (cl-mcp-f2 x))) (defun cl-mcp-f2 (x) (error \"bad ~a\" x)) (cl-mcp-f1 7)"))
       (e (getf r :error))
       (frames (mapcar #'second (getf e :backtrace))))
  (check "simple-error" (equal (getf e :type) "SIMPLE-ERROR"))
  (check "message" (equal (getf e :message) "bad 7"))
  (check "user frames in order" (and (has "CL-MCP-F2" (first frames))
                                     (has "CL-MCP-F1" (second frames))))
  (check "no swank or helper frames"
         (notany (lambda (f) (or (has "SWANK" f) (has "CL-MCP-SERVER" f)
                                 (has "EVAL-REQUEST" f)))
                 frames)))

(let ((e (getf (ev "(cerror \"Go on.\" \"stop\")") :error)))
  (check "user restarts listed" (member "CONTINUE: Go on." (getf e :restarts) :test #'equal)))
(check "backtrace limit"
       (<= (length (getf (getf (ev "(defun down (n) (if (zerop n) (error \"x\") (1+ (down (1- n))))) (down 50)"
                                   :backtrace-limit 5)
                               :error)
                         :backtrace))
           5))

(let ((r (ev "(handler-bind ((error (lambda (c) c (princ :saw)))) (signal 'simple-error :format-control \"note\")) :returned")))
  (check "signal of an error condition is not a failure" (null (getf r :error)))
  (check "signal of an error condition: handlers run" (equal (getf r :stdout) "SAW"))
  (check "signal of an error condition: evaluation goes on" (equal (getf r :values) '(":RETURNED"))))
(check "unhandled error after a handler declined"
       (equal (getf (getf (ev "(handler-bind ((error (lambda (c) c nil))) (error \"still bad\"))") :error)
                    :message)
              "still bad"))
(check "(abort) ends only the evaluation"
       (equal (getf (getf (ev "(abort)") :error) :type) "ABORT"))
(check "our abort restart is not listed"
       (equal (getf (getf (ev "(cerror \"Go on.\" \"stop\")") :error) :restarts)
              '("CONTINUE: Go on.")))
(check "(read) gets end-of-file at once"
       (equal (getf (getf (ev "(read)") :error) :type) "END-OF-FILE"))
(check "stdin is read" (equal (getf (ev "(list (read-line) (read))" :stdin (format nil "hello~%42"))
                                    :values)
                              '("(\"hello\" 42)")))
(check "y-or-n-p does not hang" (getf (ev "(y-or-n-p \"ok?\")") :error))
(check "break does not hang" (getf (ev "(break)") :error))
(check "invoke-debugger does not hang"
       (equal (getf (getf (ev "(invoke-debugger (make-condition 'simple-error :format-control \"dbg\"))")
                          :error)
                    :message)
              "dbg"))

(let ((r (ev "(defun cl-mcp-deep (n) (1+ (cl-mcp-deep (1+ n)))) (cl-mcp-deep 0)")))
  (check "stack exhaustion is an error"
         (has "STACK-EXHAUSTED" (getf (getf r :error) :type)))
  (check "stack exhaustion backtrace shows the recursion"
         (has "CL-MCP-DEEP" (second (first (getf (getf r :error) :backtrace))))))
(check "alive after stack exhaustion" (equal (getf (ev "(+ 2 2)") :values) '("4")))

(let ((r (ev "(+ 1 2")))
  (check "incomplete form" (equal (getf (getf r :error) :type) "END-OF-FILE"))
  (check "incomplete form says why" (has "parenthesis" (getf (getf r :error) :message))))
(check "safe-read refuses #."
       (has "READ-EVAL" (getf (getf (ev "#.(+ 1 2)" :safe-read t) :error) :message)))
(check "without safe-read #. works" (equal (getf (ev "'#.(+ 1 2)") :values) '("3")))

(let ((r (ev "(progn (write-string (make-string 1000 :initial-element #\\a)) (make-string 1000 :initial-element #\\b))"
             :max-output 100)))
  (check "stdout capped" (has "[truncated 900 characters]" (getf r :stdout)))
  (check "stdout kept the head" (eql 0 (search (make-string 100 :initial-element #\a) (getf r :stdout))))
  (check "value capped" (has "[truncated" (first (getf r :values)))))
(let ((r (ev "(dotimes (i 2000000) (write-string \"0123456789\")) :done" :max-output 50000)))
  (check "20 MB of output is capped" (<= (length (getf r :stdout)) 50100))
  (check "and counted" (has "[truncated 19950000 characters]" (getf r :stdout)))
  (check "value after huge output" (equal (getf r :values) '(":DONE"))))

(check "circular value prints with #1= notation"
       (equal (getf (ev "(let ((l (list 1 2))) (setf (cdr (last l)) l) l)") :values)
              '("#1=(1 2 . #1#)")))
(check "circular vector prints with #1="
       (equal (getf (ev "(let ((v (vector 1 nil))) (setf (aref v 1) v) v)") :values)
              '("#1=#(1 #1#)")))
(check "big octet vector prints quickly"
       (let ((start (get-internal-real-time)))
         (getf (ev "(make-array 100000000 :element-type '(unsigned-byte 8))" :max-output 100) :values)
         (< (- (get-internal-real-time) start) (* 5 internal-time-units-per-second))))
(check "circular value with printLength still stops"
       (has "..."
            (first (getf (ev "(let ((l (list 1 2))) (setf (cdr (last l)) l) l)" :max-output 100
                                                                          :print-length 5)
                         :values))))
(check "endless (non-circular) printing stops"
       (has "printing stopped"
            (first (getf (ev "(defclass cl-mcp-endless () ()) (defmethod print-object ((o cl-mcp-endless) s) (loop (write-string \"xxxxxxxxxx\" s))) (make-instance 'cl-mcp-endless)" :max-output 100)
                         :values))))
;; A circular structure in a condition's message must not print forever
;; (it exhausted the heap and killed the image).
(let ((e (getf (ev "(let ((l (list 1))) (setf (cdr l) l) (error \"bad ~a\" l))") :error)))
  (check "circular error message: error reported" (equal (getf e :type) "SIMPLE-ERROR"))
  (check "circular error message: bounded" (< (length (getf e :message)) 25000))
  (check "circular error message: printed with #1=" (has "bad #1=(1 . #1#)" (getf e :message))))
(let ((r (ev "(let ((l (list 1))) (setf (cdr l) l) (warn \"careful ~a\" l) :ok)")))
  (check "circular warning: evaluation goes on" (equal (getf r :values) '(":OK")))
  (check "circular warning: bounded"
         (equal (getf r :warnings) '("SIMPLE-WARNING: careful #1=(1 . #1#)"))))
(check "circular restart report is bounded"
       (has "use (2 2 2"
            (first (getf (getf (ev "(let ((l (list 2))) (setf (cdr l) l) (restart-case (error \"x\") (go-on () :report (lambda (s) (format s \"use ~a\" l)) 1)))") :error)
                         :restarts))))
;; Output budget: warnings are capped in count and characters, and a whole
;; reply stays far below Swank's 16 MiB message limit.
(let* ((r (ev "(dotimes (i 3000) (warn (make-string 200 :initial-element #\\w))) :done"))
       (w (getf r :warnings)))
  (check "warnings capped in number" (<= (length w) 201))
  (check "warnings capped in characters"
         (<= (reduce #'+ (mapcar #'length w)) 60000))
  (check "warnings say how many were left out" (has "more warnings]" (car (last w))))
  (check "value after many warnings" (equal (getf r :values) '(":DONE"))))
(let* ((r (ev "(let ((s (make-string 1000000 :initial-element (code-char #x1F389)))) (write-string s) (write-string s *error-output*) (values s s s s))"
              :max-output 1000000))
       (strings (append (list (getf r :stdout) (getf r :stderr)) (getf r :values) (getf r :warnings))))
  (check "reply fits the byte budget"
         (<= (reduce #'+ (mapcar #'cl-mcp::wire-size strings)) cl-mcp::*reply-byte-budget*))
  (check "big reply still has every part" (and (has "🎉" (getf r :stdout)) (has "🎉" (getf r :stderr))
                                               (= 4 (length (getf r :values)))))
  (check "values capped as a whole"
         (has "output limit reached" (fourth (getf r :values)))))
(check "print-length" (equal (getf (ev "(list 1 2 3 4 5)" :print-length 2) :values) '("(1 2 ...)")))
(check "print-level" (equal (getf (ev "'(1 (2 (3)))" :print-level 1) :values) '("(1 #)")))
(check "print-readably failure is reported, not fatal"
       (has "error printing" (first (getf (ev "(make-string-output-stream)" :print-readably t) :values))))
(check "unicode round trip"
       (equal (getf (ev "(concatenate 'string \"héllo \" \"λ 🎉\")") :values) '("\"héllo λ 🎉\"")))
(check "REPL variable *" (equal (getf (ev "(+ 40 2)") :values) (getf (ev "*") :values)))

;;; Interrupt and status

(ev "(defvar *cl-mcp-kept* 42)")
(let* ((result nil)
       (thread (in-thread (lambda ()
                            (setf result (ev "(progn (format t \"step 1~%working on it\") (loop))"
                                             :id "loop-1"))))))
  (sleep 0.5)
  (let ((status (cl-mcp:eval-status)))
    (check "status while running" (getf status :running))
    (check "status has the latest line" (equal (getf status :line) "working on it"))
    (check "status by id" (equal (getf (cl-mcp:eval-status "loop-1") :id) "loop-1")))
  (check "interrupt names the evaluation"
         (equal (cl-mcp:interrupt-evaluation "loop-1") '(:interrupted ("loop-1"))))
  (sb-thread:join-thread thread :timeout 10)
  (check "interrupted" (getf result :interrupted))
  (check "where is reported" (consp (getf result :where)))
  (check "partial output kept" (has "step 1" (getf result :stdout))))
(let* ((result nil)
       (thread (in-thread (lambda () (setf result (ev "(sleep 60)" :id 2))))))
  (sleep 0.3)
  (cl-mcp:interrupt-evaluation)
  (sb-thread:join-thread thread :timeout 10)
  (check "sleep interrupted" (getf result :interrupted))
  (check "where names sleep" (some (lambda (f) (has "SLEEP" f)) (getf result :where))))
(check "state survives interrupts" (equal (getf (ev "*cl-mcp-kept*") :values) '("42")))
(check "nothing running" (equal (cl-mcp:eval-status) '(:running nil)))
(check "interrupting nothing is harmless" (equal (cl-mcp:interrupt-evaluation) '(:interrupted nil)))

;;; Symbols and introspection (on a fixture system loaded through ASDF)

(push *fixture* asdf:*central-registry*)

(let ((r (cl-mcp:compile-file-with-diagnostics (fixture "warn.lisp"))))
  (check "a full warning is compile-file's failure: no success" (not (getf r :success)))
  (check "warning file: failure-p and warnings-p"
         (and (getf r :failure-p) (getf r :warnings-p)))
  (check "and loads" (getf r :loaded))
  (check "full warning with line/column"
         (find-if (lambda (d) (and (equal (getf d :severity) "warning")
                                   (eql (getf d :line) 5) (eql (getf d :column) 5)
                                   (has "not a number" (getf d :context))))
                  (getf r :diagnostics)))
  (check "style-warning reported"
         (find "style-warning" (getf r :diagnostics) :key (lambda (d) (getf d :severity))
                                                    :test #'equal)))
(let ((r (cl-mcp:compile-file-with-diagnostics (fixture "readerr.lisp"))))
  (check "read error fails" (not (getf r :success)))
  (check "read error located"
         (find-if (lambda (d) (and (equal (getf d :severity) "error") (eql (getf d :line) 6)
                                   (has "NO-SUCH-PACKAGE-XYZ" (getf d :message))))
                  (getf r :diagnostics))))
(check "missing file" (getf (cl-mcp:compile-file-with-diagnostics "/nonexistent/x.lisp") :error))
(let ((path (format nil "/tmp/cl-mcp-nopkg-~D.lisp" (sb-posix:getpid))))
  (with-open-file (out path :direction :output :if-exists :supersede)
    (format out ";; header~%  (in-package :cl-mcp-no-such-pkg)~%(defun f () 1)~%"))
  (let* ((r (cl-mcp:compile-file-with-diagnostics path))
         (d (find "error" (getf r :diagnostics) :key (lambda (d) (getf d :severity))
                                                :test #'equal)))
    (check "missing package: compilation fails" (not (getf r :success)))
    (check "missing package: no Lisp error" (null (getf r :error)))
    (check "missing package: diagnostic names it" (has "CL-MCP-NO-SUCH-PKG" (getf d :message)))
    (check "missing package: diagnostic located"
           (and (eql (getf d :line) 2) (eql (getf d :column) 3) (equal (getf d :path) path))))
  (delete-file path))
(let ((path (format nil "/tmp/cl-mcp-many-warnings-~D.lisp" (sb-posix:getpid))))
  (with-open-file (out path :direction :output :if-exists :supersede)
    (dotimes (i 400)
      (format out "(defun cl-mcp-many-~D () (+ 1 \"a\"))~%" i)))
  (let ((d (getf (cl-mcp:compile-file-with-diagnostics path :load nil) :diagnostics)))
    (check "diagnostics capped" (<= (length d) 301))
    (check "diagnostics say how many were left out"
           (has "more diagnostics]" (getf (car (last d)) :message))))
  (delete-file path))

(let ((r (cl-mcp:load-system "mcpdemo" :force t)))
  (check "load-system" (getf r :success))
  (check "system loaded" (find-package "MCPDEMO")))
(check "load-system of an unknown system"
       (let ((r (cl-mcp:load-system "cl-mcp-no-such-system")))
         (and (not (getf r :success)) (has "MISSING" (getf (getf r :error) :type)))))

(check "resolve pkg:name" (eq (cl-mcp:resolve-symbol "mcpdemo:add") (find-symbol "ADD" "MCPDEMO")))
(check "resolve pkg::name any case" (eq (cl-mcp:resolve-symbol "MCPdemo::Use-Macro")
                                        (find-symbol "USE-MACRO" "MCPDEMO")))
(check "resolve bare name in package" (eq (cl-mcp:resolve-symbol "twice" :package "mcpdemo")
                                          (find-symbol "TWICE" "MCPDEMO")))
(check "resolve unique external from anywhere" (eq (cl-mcp:resolve-symbol "with-doubled")
                                                   (find-symbol "WITH-DOUBLED" "MCPDEMO")))
(check "unknown package named" (has "no-such" (nth-value 1 (cl-mcp:resolve-symbol "no-such:x"))))
(check "unknown symbol named" (has "zzz-none" (nth-value 1 (cl-mcp:resolve-symbol "mcpdemo::zzz-none"))))

(let* ((r (cl-mcp:find-definitions "mcpdemo:add"))
       (d (first (getf r :definitions))))
  (check "definition kind" (equal (getf d :kind) "function"))
  (check "definition file" (has "fixture/main.lisp" (getf d :path)))
  (check "definition line" (eql (getf d :line) 6))
  (check "definition context" (equal (getf d :context) "(defun add (a b)")))
(let ((r (cl-mcp:find-definitions "area" :package "mcpdemo")))
  (check "generic function and its method"
         (and (find "generic-function" (getf r :definitions) :key (lambda (d) (getf d :kind)) :test #'equal)
              (find "method" (getf r :definitions) :key (lambda (d) (getf d :kind)) :test #'equal))))
(check "find-definitions of unknown" (getf (cl-mcp:find-definitions "nope:x") :error))

(let ((r (cl-mcp:describe-symbol "mcpdemo:with-doubled")))
  (check "macro kind" (equal (getf r :kinds) '("macro")))
  (check "arglist" (equal (getf r :arglist) "((var x) &body body)"))
  (check "docstring" (has "twice X" (getf (first (getf r :documentation)) :text))))
(check "variable kind" (equal (getf (cl-mcp:describe-symbol "mcpdemo:*counter*") :kinds) '("variable")))
(check "class kind" (equal (getf (cl-mcp:describe-symbol "mcpdemo:circle") :kinds) '("class")))
(check "generic function kind" (member "generic-function" (getf (cl-mcp:describe-symbol "mcpdemo:area") :kinds)
                                       :test #'equal))
(check "special operator kind" (member "special-operator" (getf (cl-mcp:describe-symbol "let") :kinds)
                                       :test #'equal))
(check "constant kind" (member "constant" (getf (cl-mcp:describe-symbol "pi") :kinds) :test #'equal))

(flet ((ref-names (kind name)
         (mapcar (lambda (r) (getf r :name)) (getf (cl-mcp:xref kind name) :refs))))
  (check "who calls" (member "MCPDEMO:TWICE" (ref-names :calls "mcpdemo:add") :test #'equal))
  (check "who references" (member "MCPDEMO:BUMP" (ref-names "references" "mcpdemo:*counter*") :test #'equal))
  (check "who sets" (member "MCPDEMO:BUMP" (ref-names "sets" "mcpdemo:*counter*") :test #'equal))
  (check "who macroexpands" (member "MCPDEMO::USE-MACRO" (ref-names "macroexpands" "mcpdemo:with-doubled")
                                    :test #'equal))
  (check "who specializes" (some (lambda (n) (has "AREA" n)) (ref-names "specializes" "mcpdemo:circle")))
  (check "xref lines" (eql 11 (getf (first (getf (cl-mcp:xref :calls "mcpdemo:add") :refs)) :line))))
(check "bad xref kind" (getf (cl-mcp:xref "nonsense" "mcpdemo:add") :error))
(let ((r (cl-mcp:xref :calls "car" :limit 5)))
  (check "xref limit" (= 5 (length (getf r :refs))))
  (check "xref total count" (> (getf r :count) 5))
  (check "xref truncated" (getf r :truncated)))
(check "xref under a directory leaves the rest out"
       (let ((r (cl-mcp:xref :calls "mcpdemo:add" :under (namestring *fixture*))))
         (and (= 1 (getf r :count)) (zerop (getf r :outside)))))
(check "xref under another directory"
       (let ((r (cl-mcp:xref :calls "mcpdemo:add" :under "/nonexistent-dir/")))
         (and (zerop (getf r :count)) (= 1 (getf r :outside)))))

;; Definition positions after non-ASCII text: SBCL gives byte offsets.
(let ((path (format nil "/tmp/cl-mcp-utf8-~D.lisp" (sb-posix:getpid))))
  (with-open-file (out path :direction :output :if-exists :supersede
                            :external-format :utf-8)
    (format out ";; ~A~%(in-package :cl-user)~%(defun cl-mcp-after-accents () (cl-mcp-after-accents-2))~%(defun cl-mcp-after-accents-2 () 1)~%"
            (make-string 43 :initial-element (code-char #xE9))))
  (cl-mcp:compile-file-with-diagnostics path)
  (let ((d (first (getf (cl-mcp:find-definitions "cl-user::cl-mcp-after-accents") :definitions))))
    (check "definition line after non-ASCII text" (eql 3 (getf d :line)))
    (check "definition column after non-ASCII text" (eql 1 (getf d :column)))
    (check "definition context after non-ASCII text"
           (has "(defun cl-mcp-after-accents ()" (getf d :context))))
  (let ((ref (first (getf (cl-mcp:xref :calls "cl-user::cl-mcp-after-accents-2") :refs))))
    (check "xref line after non-ASCII text" (eql 3 (getf ref :line))))
  (delete-file path))

;; Code tools default to the session's current package.
(ev "(defpackage :cl-mcp-sess-demo (:use :cl)) (in-package :cl-mcp-sess-demo) (defmacro sess-mac (x) `(list ,x)) (defun sess-fn () 1)"
    :session "code-session")
(check "describe resolves in the session's package"
       (equal (getf (cl-mcp:describe-symbol "sess-fn" :session "code-session") :symbol)
              "CL-MCP-SESS-DEMO::SESS-FN"))
(check "find-definitions resolves in the session's package"
       (equal (getf (cl-mcp:find-definitions "sess-fn" :session "code-session") :symbol)
              "CL-MCP-SESS-DEMO::SESS-FN"))
(check "macroexpand reads in the session's package"
       (equal (getf (cl-mcp:macroexpand-form "(sess-mac 1)" :session "code-session" :mode "1")
                    :expansion)
              "(list 1)"))
(cl-mcp:macroexpand-form "(sess-mac cl-mcp-junk-symbol-xyz)" :session "code-session")
(check "macroexpand leaves no junk symbols"
       (null (find-symbol "CL-MCP-JUNK-SYMBOL-XYZ" "CL-MCP-SESS-DEMO")))

(let ((r (cl-mcp:apropos-symbols "TWIC" :package "mcpdemo")))
  (check "apropos in package" (equal (getf r :symbols) '((:symbol "MCPDEMO:TWICE" :kinds ("function"))))))
(check "apropos external only"
       (null (getf (cl-mcp:apropos-symbols "use-macro" :package "mcpdemo" :external-only t) :symbols)))
(check "apropos limit"
       (let ((r (cl-mcp:apropos-symbols "a" :limit 3)))
         (and (= 3 (length (getf r :symbols))) (> (getf r :count) 3))))

(let ((r (cl-mcp:macroexpand-form "(with-doubled (z 3) z)" :package "mcpdemo" :mode "1")))
  (check "macroexpand-1" (equal (getf r :expansion) "(let ((z (twice 3)))
  z)"))
  (check "expanded flag" (getf r :expanded)))
(check "macroexpand all"
       (not (has "when" (getf (cl-mcp:macroexpand-form "(with-doubled (z 3) (when z z))"
                                                      :package "mcpdemo" :mode :all)
                              :expansion))))
(check "macroexpand read error" (getf (cl-mcp:macroexpand-form "(oops" :package "mcpdemo") :error))

;;; Systems

(let ((r (cl-mcp:test-system "mcpdemo")))
  (check "fiveam summary" (equal (getf r :summary)
                                 '(:framework "fiveam" :passed 2 :failed 1 :skipped 0)))
  (check "failing test makes success nil" (not (getf r :success)))
  (check "test output captured" (has "FAILS-ON-PURPOSE" (getf r :stdout)))
  (let ((f (first (getf r :failures))))
    (check "one failure, per test" (= 1 (length (getf r :failures))))
    (check "failure names its test and suite"
           (and (equal (getf f :test) "MCPDEMO-TESTS::FAILS-ON-PURPOSE")
                (equal (getf f :suite) "MCPDEMO-TESTS::DEMO-SUITE")))
    (check "failure message on one line, expected and actual"
           (equal (getf f :message) "(MCPDEMO:ADD 2 2) evaluated to 4 which is not = to 5"))
    (check "failure form" (equal (getf f :form) "(= 5 (MCPDEMO:ADD 2 2))"))
    ;; The server locates it (at tests.lisp:14:3, src/tools/asdf/test_locations.rs).
    (check "failure carries what locates it: the test's name and package, the expression's shape"
           (and (equal (getf f :name) "FAILS-ON-PURPOSE")
                (equal (getf f :package) "MCPDEMO-TESTS")
                (equal (getf f :expr) '("=" "5" ("ADD" "2" "2")))
                (eql (getf f :nth) 0)))
    (check "the source files to look in"
           (some (lambda (p) (has "tests.lisp" p)) (getf r :source-files)))))
(let ((r (cl-mcp:test-system "mcpdemo" :test "adds")))
  (check "a single named test runs alone"
         (and (getf r :success)
              (equal (getf r :summary) '(:framework "fiveam" :passed 2 :failed 0 :skipped 0))
              (not (has "FAILS-ON-PURPOSE" (getf r :stdout))))))
(let ((r (cl-mcp:test-system "mcpdemo" :test "no-such-test")))
  (check "an unknown test name is an error listing the known ones"
         (and (not (getf r :success))
              (equal (getf (getf r :error) :type) "UNKNOWN-TEST")
              (has "MCPDEMO-TESTS::ADDS" (getf (getf r :error) :message)))))
(let ((r (cl-mcp:test-system "mcpdemo" :test "fails-on-purpse")))
  (check "a misspelt test name: the nearest name"
         (has "Did you mean MCPDEMO-TESTS::FAILS-ON-PURPOSE?" (getf (getf r :error) :message))))
(let ((r (cl-mcp:test-system "cl-mcp-no-such-system")))
  (check "test-system of an unknown system: plain message"
         (has "ASDF cannot find a system named" (getf (getf r :error) :message)))
  (check "test-system of an unknown system: no backtrace" (null (getf (getf r :error) :backtrace))))
(let ((r (cl-mcp:system-info "mcpdemo")))
  (check "system version" (equal (getf r :version) "0.1.0"))
  (check "system author" (equal (getf r :author) "Test Author"))
  (check "system license" (equal (getf r :license) "MIT"))
  (check "system loaded" (getf r :loaded))
  (check "system source file" (has "mcpdemo.asd" (getf r :source-file))))
(check "tests system deps" (equal (getf (cl-mcp:system-info "mcpdemo/tests") :depends-on)
                                  '("mcpdemo" "fiveam")))
(check "unknown system" (getf (cl-mcp:system-info "cl-mcp-no-such-system") :error))
(check "list systems" (find "mcpdemo" (getf (cl-mcp:list-systems :filter "MCPDEMO") :systems)
                            :key (lambda (s) (getf s :name)) :test #'equal))
(check "debian systems findable" (find "fiveam" (getf (cl-mcp:list-systems :filter "fiveam") :systems)
                                       :key (lambda (s) (getf s :name)) :test #'equal))

;; Every framework's summary reader, on real transcripts of real runs
;; (tests/transcripts/*.txt: a ";;" header naming the framework's version,
;; then the run's stdout and stderr).
(defun transcript (name)
  "The stdout and stderr of the transcript NAME, as TEST-SYSTEM reads them."
  (let* ((text (uiop:read-file-string
                (merge-pathnames (format nil "tests/transcripts/~A.txt" name)
                                 cl-user::*helpers-dir*)
                :external-format :utf-8))
         (out (search (format nil ";; ---- stdout~%") text))
         (err (search (format nil "~%;; ---- stderr~%") text)))
    (concatenate 'string
                 (subseq text (+ out (length ";; ---- stdout") 1) err)
                 (string #\Newline)
                 (subseq text (+ err (length ";; ---- stderr") 2)))))

(dolist (case '(("fiveam-fail" "fiveam" 3 1) ("fiveam-green" "fiveam" 2 0)
                ;; "× 1 of 1 test failed": one test (the package) of one.
                ("rove-fail" "rove" 0 1) ("rove-fail-nocolor" "rove" 0 1)
                ("rove-green" "rove" 1 0)
                ("parachute-fail" "parachute" 3 1) ("parachute-green" "parachute" 2 0)
                ;; Not the per-test "2 assertions passed": the summary's.
                ("lisp-unit2-fail" "lisp-unit2" 3 1) ("lisp-unit2-green" "lisp-unit2" 2 0)
                ("rt-fail" "rt" 1 1) ("rt-green" "rt" 2 0)
                ("ptester-fail" "ptester" 1 1) ("ptester-green" "ptester" 2 0)
                ("xlunit-fail" "xlunit" 1 1) ("xlunit-green" "xlunit" 2 0)))
  (destructuring-bind (name framework passed failed) case
    (let ((summary (cl-mcp:summarize-test-output (transcript name))))
      (check (format nil "summary of the ~A transcript: ~S" name summary)
             (equal summary (list :framework framework :passed passed
                                  :failed failed :skipped 0))))))
;; Real libraries' own suites (a planted bug in a copy of the library):
;; the counts and each failure itemised, named, its message quoted.
(flet ((failures (name)
         (let ((summary (cl-mcp:summarize-test-output (transcript name))))
           (list summary (cl-mcp::output-failures (getf summary :framework)
                                                  (transcript name))))))
  (destructuring-bind (summary failures) (failures "weitz-ppcre-green")
    (check "cl-ppcre passing" (and (equal (getf summary :failed) 0) (null failures))))
  (destructuring-bind (summary failures) (failures "weitz-ppcre-fail")
    (check (format nil "cl-ppcre's failures: ~S ~S" summary failures)
           (and (equal (getf summary :framework) "weitz")
                (equal (getf summary :failed) 2)
                (equal (mapcar (lambda (f) (getf f :test)) failures)
                       '("Simple tests from file \"simple\" #19"
                         "Simple tests from file \"simple\" #20"))
                (equal (getf (first failures) :form)
                       "(EQUAL (COUNT-MATCHES \"a\" \"foo bar baz\") 2)"))))
  (destructuring-bind (summary failures) (failures "weitz-flexi-green")
    (check "flexi-streams passing" (and (equal (getf summary :failed) 0) (null failures))))
  (destructuring-bind (summary failures) (failures "weitz-flexi-signals")
    ;; No "Some tests failed.": the run signalled before (TEST-SYSTEM's
    ;; outcome is then error, the condition quoted).
    (declare (ignore failures))
    (check (format nil "flexi-streams signalling: ~S" summary) (null summary))
    (check "flexi-streams' failed checks read"
           (let ((f (cl-mcp::weitz-failures (cl-mcp::text-lines (transcript "weitz-flexi-signals")))))
             (and (> (length f) 10)
                  (equal (getf (first f) :test) "Reading/writing files")
                  (search "FILE-EQUAL" (getf (first f) :form))))))
  (destructuring-bind (summary failures) (failures "ptester-abort")
    (check (format nil "ptester's abort is a failure, quoted: ~S ~S" summary failures)
           (and (equal (getf summary :failed) 1) (= 1 (length failures))
                (equal (getf (first failures) :test) "cl-base64 tests")
                (search "aborted by signalling an uncaught error: The value 8/3 is not of type FIXNUM"
                        (getf (first failures) :message)))))
  (destructuring-bind (summary failures) (failures "ptester-fail")
    (check (format nil "ptester's failed check: ~S" failures)
           (and (equal (getf summary :failed) 1)
                (equal failures '((:test "demo-ptester" :message "wanted: 5 got: 1"
                                   :form "(- 3 2)"))))))
  (destructuring-bind (summary failures) (failures "rt-alexandria-fail")
    (check (format nil "RT's failed tests: ~S ~S" summary failures)
           (and (equal (getf summary :failed) 1)
                (equal failures '((:test "ALEXANDRIA-TESTS::FLATTEN.1"
                                   :message "expected (1 2 3 4 5 6 7), got NIL"
                                   :form "(ALEXANDRIA:FLATTEN '((1) 2 (((3 4))) ((((5)) 6)) 7))"))))))
  (check "RT's name-only list"
         (equal (cl-mcp::output-failures
                 "rt" (format nil "Doing 2 pending tests of 2 tests total.~%2 out of 2 total tests failed: P::A, P::B.~%"))
                '((:test "P::A" :message "failed (RT printed no value)" :form nil)
                  (:test "P::B" :message "failed (RT printed no value)" :form nil)))))
;; Fiasco prints no summary of a passing run: its results come from its
;; result objects (tests/frameworks.rs), never from these lines.
(check "fiasco's output is no summary"
       (and (null (cl-mcp:summarize-test-output (transcript "fiasco-green")))
            (null (cl-mcp:summarize-test-output (transcript "fiasco-fail")))))
(check "summaries: none" (null (cl-mcp:summarize-test-output "hello")))
(check "a per-test line is no summary"
       (null (cl-mcp:summarize-test-output
              (format nil "PKG::ADDS - PASSED (0.02s) : 2 assertions passed~%"))))
(check "outcomes"
       (equal (list (cl-mcp::test-outcome nil)
                    (cl-mcp::test-outcome '(:framework "rt" :passed 2 :failed 0))
                    (cl-mcp::test-outcome '(:framework "rt" :passed 1 :failed 1))
                    (cl-mcp::test-outcome '(:framework "rt" :passed 2 :failed 0) :error t))
              '(:unknown :passed :failed :error)))

(let ((info (cl-mcp:image-info)))
  (check "image info" (and (equal (getf info :implementation) "SBCL")
                           (integerp (getf info :pid))
                           (getf info :swank-version))))

(format t "~&~D checks, ~D failures~%" *checks* *failures*)
(sb-ext:exit :code (if (zerop *failures*) 0 1) :abort t)
