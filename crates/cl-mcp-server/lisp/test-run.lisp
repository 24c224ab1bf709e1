;;;; test-run.lisp --- running test systems: the frameworks' results per
;;;; check, single named tests, where failed checks are written.

(in-package #:cl-mcp-server)

(eval-when (:compile-toplevel :load-toplevel :execute)
  (require "ASDF"))

;;; Test results, per test, from the frameworks themselves.

(defvar *test-results* nil
  "While TEST-SYSTEM runs: a cons whose car collects one plist per check the
test framework reported (see RECORD-FIVEAM-RESULTS); NIL otherwise, and
then the hooks below do nothing.")

(defvar *skip-test-perform* nil
  "True while TEST-SYSTEM runs a single named test: the systems' own
TEST-OP actions (which run the whole suite) are skipped, their
dependencies still loaded.")

(defun ensure-test-op-hook ()
  "Install (once, and again after ASDF is reloaded) the :AROUND method on
ASDF:PERFORM of TEST-OP that installs the framework hooks once a test
system's dependencies are loaded and honours *SKIP-TEST-PERFORM*. Outside
TEST-SYSTEM it only calls the next method."
  (unless (find-method #'asdf:perform '(:around)
                       (list (find-class 'asdf:test-op) (find-class 'asdf:component))
                       nil)
    (defmethod asdf:perform :around ((operation asdf:test-op) (component asdf:component))
      (when *test-results* (ensure-fiveam-hook))
      (if *skip-test-perform*
          ;; Skipped, the action still counts as performed: ASDF's plan
          ;; asserts the stamp PERFORM's :AFTER method would have set.
          (asdf::mark-operation-done operation component)
          (let ((*in-test-op* t))
            (call-next-method))))))

(defun fiveam-symbol (name)
  (let ((package (find-package "IT.BESE.FIVEAM")))
    (and package (find-symbol name package))))

(defun fiveam-call (name &rest args)
  (apply (fiveam-symbol name) args))

(defvar *fiveam-run-depth* 0
  "How many FiveAM runs (%RUN) are under way in this thread: an EXPLAIN
called inside a test (FiveAM's own suite tests EXPLAIN! on a suite meant to
fail) is not the run's result.")

(defun ensure-fiveam-hook ()
  "When FiveAM is loaded, a :BEFORE method on its EXPLAIN (which RUN!,
EXPLAIN! and RUN-ALL-TESTS call with the results of a run) that records the
results while TEST-SYSTEM runs, but those explained inside a running test
(an :AROUND method on %RUN counts the runs under way). Installed once."
  (let ((run (fiveam-symbol "%RUN")))
    (when (and run (fboundp run)
               (typep (fdefinition run) 'generic-function)
               (null (find-method (fdefinition run) '(:around) (list (find-class t)) nil)))
      (let ((*error-output* (make-broadcast-stream)))
        (handler-bind ((warning #'muffle-warning))
          (eval `(defmethod ,run :around (test)
                   (declare (ignore test))
                   (let ((*fiveam-run-depth* (1+ *fiveam-run-depth*)))
                     (call-next-method))))))))
  (let ((explain (fiveam-symbol "EXPLAIN")))
    (when (and explain (fboundp explain)
               (typep (fdefinition explain) 'generic-function)
               (null (find-method (fdefinition explain) '(:before)
                                  (list (find-class t) (find-class t)) nil)))
      ;; Compiled inside the user's build: nothing of it is a diagnostic.
      (let ((*error-output* (make-broadcast-stream)))
        (handler-bind ((warning #'muffle-warning))
          (eval `(defmethod ,explain :before (explainer results &optional stream depth)
                   (declare (ignore explainer stream))
                   (when (and *test-results* (or (null depth) (eql depth 0))
                              (eql *fiveam-run-depth* 0))
                     (record-fiveam-results results)))))))))

(defun systems-under (name)
  "The names of the system NAME and of every registered system whose .asd
lies in or under its directory (its test systems)."
  (let* ((system (asdf:find-system name nil))
         (dir (and system (asdf:system-source-directory system))))
    (cons name
          (loop for n in (asdf:registered-systems)
                for s = (ignore-errors (registered-system* n))
                for d = (and s (ignore-errors (asdf:system-source-directory s)))
                when (and d dir (uiop:subpathp d dir) (string/= n name))
                  collect n))))

(defun project-source-files (name)
  "The Lisp source files of the systems SYSTEMS-UNDER NAME (NAME and its
test systems), where the server finds the failed tests' forms by name."
  (let ((files '()))
    (labels ((walk (c)
               (cond ((typep c 'asdf:cl-source-file)
                      (let ((p (ignore-errors (asdf:component-pathname c))))
                        (when p (pushnew (namestring p) files :test #'string=))))
                     ((typep c 'asdf:parent-component)
                      (mapc #'walk (ignore-errors (asdf:component-children c)))))))
      (when (asdf:find-system name nil)
        (dolist (n (systems-under name))
          (let ((s (ignore-errors (registered-system* n))))
            (when s (walk s))))))
    (nreverse files)))

(defun named-data-file (test)
  "The file name a test's printed name says it comes from (CL-PPCRE's
`Simple tests from file \"simple\" #19`), or NIL."
  (let* ((at (search "from file \"" test))
         (start (and at (+ at (length "from file \""))))
         (end (and start (position #\" test :start start))))
    (and end (< start end) (subseq test start end))))

(defun test-source-files (name failures)
  "PROJECT-SOURCE-FILES of NAME, and the files of test forms the FAILURES'
tests name (CL-PPCRE's test/simple, read by its runner), found in those
files' directories."
  (let* ((files (project-source-files name))
         (dirs (remove-duplicates (mapcar (lambda (f) (directory-namestring f)) files)
                                  :test #'string=)))
    (dolist (f failures files)
      (let ((data (named-data-file (or (getf f :test) ""))))
        (when (and data (not (find #\/ data)))
          (dolist (dir dirs)
            (let ((p (probe-file (concatenate 'string dir data))))
              (when p
                (pushnew (namestring p) files :test #'string=)
                (return)))))))))

(defun record-fiveam-results (results)
  "Push one plist per FiveAM result object onto *TEST-RESULTS*:
(:framework \"fiveam\" :status :passed|:failed|:skipped :test S :suite S
:message S :form S :location PLIST)."
  (dolist (r results)
    (ignore-errors
     (let* ((status (cond ((fiveam-call "TEST-FAILURE-P" r) :failed)
                          ((fiveam-call "TEST-SKIPPED-P" r) :skipped)
                          ((fiveam-call "TEST-PASSED-P" r) :passed)
                          (t :unknown)))
            (test-case (ignore-errors (fiveam-call "TEST-CASE" r)))
            (name (and test-case (ignore-errors (fiveam-call "NAME" test-case))))
            (suite (and test-case
                        (ignore-errors (fiveam-call "NAME" (fiveam-call "TEST-SUITE" test-case))))))
       (push (append
              (list :framework "fiveam" :status status
                    :name name
                    :test (and name (qualified-name name))
                    :suite (and suite (qualified-name suite)))
              (when (eq status :failed)
                (list :message (one-line (print-capped (or (ignore-errors (fiveam-call "REASON" r))
                                                           "no reason given")
                                                       5000))
                      :expr (ignore-errors (fiveam-call "TEST-EXPR" r))
                      :form (let ((expr (ignore-errors (fiveam-call "TEST-EXPR" r))))
                              (and expr
                                   ;; Pretty, so quoted data reads as written.
                                   (let ((*print-pretty* t) (*print-right-margin* 100000)
                                         (*print-length* 100) (*print-level* 10)
                                         (*print-circle* t))
                                     (truncate-string (one-line (prin1-to-string* expr))
                                                      2000)))))))
             (car *test-results*))))))

(defun fiveam-test-names ()
  "The names (symbols) of every FiveAM test and suite."
  (let ((table (let ((s (fiveam-symbol "*TEST*"))) (and s (boundp s) (symbol-value s)))))
    (when (hash-table-p table)
      (loop for k being the hash-keys of table when (and k (symbolp k)) collect k))))

(defun find-named-test (designator)
  "The FiveAM test or suite DESIGNATOR names (`name` in any package, any
case, or `pkg::name`): (values SYMBOL NIL) or (values NIL MESSAGE)."
  (let* ((names (fiveam-test-names))
         (qualified (find #\: designator))
         (matches (if qualified
                      (multiple-value-bind (symbol err) (resolve-symbol designator)
                        (declare (ignore err))
                        (and symbol (member symbol names) (list symbol)))
                      (remove-if-not (lambda (s) (string-equal (symbol-name s) designator))
                                     names))))
    (cond ((null (find-package "IT.BESE.FIVEAM"))
           (values nil (format nil "No test named ~S: the test system does not use FiveAM, the framework whose single tests and suites can be run by name." designator)))
          ((null matches)
           (values nil (format nil "No FiveAM test or suite named ~S.~A"
                               designator (name-guess-clause designator names :kind "tests and suites"))))
          ((rest matches)
           (values nil (format nil "~S names several FiveAM tests: ~{~A~^, ~}; qualify it."
                               designator (mapcar #'qualified-name matches))))
          (t (values (first matches) nil)))))

(defun run-named-test (designator)
  "Run the FiveAM test or suite DESIGNATOR names, with RUN!: NIL, or the
message saying it names none (with the nearest names)."
  (ensure-fiveam-hook)
  (multiple-value-bind (symbol message) (find-named-test designator)
    (if symbol
        (progn (fiveam-call "RUN!" symbol) nil)
        message)))

(defun results-summary (records)
  "Counts of the recorded checks: (:framework S :passed N :failed N :skipped N),
S naming each framework that recorded checks (\"fiveam, fiasco\")."
  (list :framework (format nil "~{~A~^, ~}"
                           (remove-duplicates (mapcar (lambda (r) (getf r :framework)) records)
                                              :test #'equal :from-end t))
        :passed (count :passed records :key (lambda (r) (getf r :status)))
        :failed (count :failed records :key (lambda (r) (getf r :status)))
        :skipped (count :skipped records :key (lambda (r) (getf r :status)))))

(defun form-shape (form)
  "FORM (a failed check's expression) as plain data the server matches
against its own reading of the source (src/tools/asdf/test_locations.rs):
a symbol or number is its name (a number's printed text), a string is
(:STRING TEXT), a list the list of its elements' shapes (a dotted tail
dropped), anything else :OTHER. Bounded: at most 2000 conses, 100 deep."
  (let ((budget 2000))
    (labels ((shape (x depth)
               (cond ((or (null x) (symbolp x)) (symbol-name x))
                     ((stringp x) (list :string x))
                     ((numberp x)
                      ;; Not WITH-STANDARD-IO-SYNTAX: readably, CLISP prints 5 as "5.".
                      (let ((*print-base* 10) (*print-radix* nil) (*print-readably* nil)
                            (*read-default-float-format* 'single-float))
                        (string-upcase (prin1-to-string x))))
                     ((and (consp x) (< depth 100) (plusp budget))
                      (loop for tail on x
                            while (and (consp tail) (plusp budget))
                            do (decf budget)
                            collect (shape (car tail) (1+ depth))))
                     (t :other))))
      (shape form 0))))

(defun user-macro-names (package)
  "The names of the macros accessible in PACKAGE that are neither Common
Lisp's nor FiveAM's (a user's macro may define a test), at most 2000."
  (let ((excluded (list (find-package "COMMON-LISP") (find-package "IT.BESE.FIVEAM")))
        (names '()))
    (block collect
      (do-symbols (s package)
        (when (and (fboundp s) (macro-function s)
                   (not (member (symbol-package s) excluded)))
          (pushnew (symbol-name s) names :test #'string=)
          (when (>= (length names) 2000) (return-from collect)))))
    names))

(defun test-failures (records)
  "The failed checks of RECORDS, in the order they ran, as (:test S :suite S
:message S :form S :name S :package S :nicknames (S...) :macros (S...)
:expr SHAPE :nth N): what the server needs to find where each is written
in the source files (the reply's :source-files). NAME is the test's
symbol name (PACKAGE, NICKNAMES its package's; MACROS the user macros
accessible there, one of which may have made the test); EXPR the failed
expression's FORM-SHAPE; NTH counts the earlier failures of the same
expression in the same test (the next check of that form)."
  (let ((seen (make-hash-table :test 'equal))
        (macros (make-hash-table :test 'eq)))
    (loop for r in records
          when (eq (getf r :status) :failed)
            collect (append (list :test (getf r :test) :suite (getf r :suite)
                                  :message (getf r :message) :form (getf r :form))
                            (let ((name (getf r :name))
                                  (key (list (getf r :test) (getf r :form))))
                              (append
                               (cond ((and name (symbolp name))
                                      (let ((package (symbol-package name)))
                                        (append
                                         (list :name (symbol-name name))
                                         (when package
                                           (list :package (package-name package)
                                                 :nicknames (package-nicknames package)
                                                 :macros (or (gethash package macros)
                                                             (setf (gethash package macros)
                                                                   (ignore-errors
                                                                    (user-macro-names package)))))))))
                                     ((getf r :test)
                                      (list :name (unqualified (getf r :test)))))
                               (when (getf r :expr)
                                 (list :expr (ignore-errors (form-shape (getf r :expr)))))
                               (list :nth (1- (incf (gethash key seen 0))))))))))

(defun read-printed-form (text)
  "TEXT (a form as a framework printed it) read back as data, in a package
of its own deleted after (a name without a package interns nowhere else),
or NIL when it does not read (an unknown package, a symbol not external)."
  (let ((package (make-package (symbol-name (gensym "CL-MCP-READ-")) :use '("COMMON-LISP"))))
    (unwind-protect
         (ignore-errors
          (with-standard-io-syntax
            (let ((*package* package) (*read-eval* nil))
              (values (read-from-string text)))))
      (ignore-errors (delete-package package)))))

(defun output-records (summary text)
  "Records, in the shape of RECORD-FIVEAM-RESULTS' failed ones, of the
failures the framework SUMMARY names itemised in TEXT (OUTPUT-FAILURES;
without SUMMARY, a run ended by an error, those of any framework found):
the test's symbol when its printed name reads as one that exists, the
failed form read back, for TEST-FAILURES to locate."
  (multiple-value-bind (failures framework)
      (output-failures (getf summary :framework) text)
  (loop for f in failures
        for test = (getf f :test)
        for symbol = (and (find #\: test) (not (find #\Space test))
                          (ignore-errors (resolve-symbol test)))
        collect (list :framework framework :status :failed
                      :name (or symbol test)
                      :test (if symbol (qualified-name symbol) test)
                      :message (getf f :message) :form (getf f :form)
                      :expr (and (getf f :form) (read-printed-form (getf f :form)))))))

(defun test-system (name &key test force coverage id (max-output 50000))
  "RUN-TEST-SYSTEM, or with COVERAGE (a directory for the HTML report),
TEST-SYSTEM-WITH-COVERAGE (coverage.lisp)."
  (if coverage
      (test-system-with-coverage name coverage :test test :id id :max-output max-output)
      (run-test-system name :test test :force force :id id :max-output max-output)))

(defun run-test-system (name &key test force coverage-systems id (max-output 50000))
  "Run (ASDF:TEST-SYSTEM NAME) with output captured (standard input is at
end-of-file, so it never waits). With TEST (a FiveAM test or suite name),
the systems' test actions are skipped (their dependencies still loaded)
and only that test runs (a TEST that names none gives the :error
(:type \"UNKNOWN-TEST\" :message S), S naming the nearest tests). FORCE
rebuilds the system and its test systems (SYSTEMS-UNDER);
COVERAGE-SYSTEMS rebuilds those instrumented for coverage (their
dependencies first loaded as usual, see coverage.lisp). Returns (:system
S :success T-or-NIL :outcome \"passed\"|\"failed\"|\"error\"|\"unknown\"
:summary NIL-or-(:framework S :passed N :failed N :skipped N) :failures
(TEST-FAILURES' plists) :source-files (P...) :suite-output S (the end of
the run's output without the compiler's lines) :diagnostics (...) :warnings-p :failure-p :failed :stdout S :stderr S
:elapsed-ms N :error ...). The summary and failures come from FiveAM's or
Fiasco's results when they ran (counts are checks), else the summary is
read from the tail of the output (frameworks.lisp). :success is T only for
the outcome \"passed\": no error, a recognised result and no failed check;
output no reader recognises is \"unknown\"."
  (when (null (ignore-errors (asdf:find-system (string-downcase (string name)) nil)))
    (return-from run-test-system
      (list :system (string-downcase (string name)) :success nil :outcome "error" :summary nil
            :failures nil :diagnostics nil :warnings-p nil :failure-p t :failed nil
            :stdout "" :stderr "" :elapsed-ms 0
            :error (missing-system-error (string-downcase (string name))))))
  (ensure-test-op-hook)
  (let* ((name (string-downcase (string name)))
         (notes '()) (build-error nil) (failed nil) (flags nil) (values nil)
         (unknown nil)
         (box (list nil))
         (collector (list nil))
         (fiasco-before (fiasco-history))
         (tails (list nil))
         (result
           (let ((*test-results* collector)
                 (*skip-test-perform* (and test t)))
             (fit-build-output (run-captured
              (lambda ()
                (setf (values notes build-error failed values flags)
                      (call-building
                       (lambda ()
                         (call-copying-output
                          (lambda ()
                            (cond (coverage-systems
                                   (load-dependencies-plainly coverage-systems)
                                   (call-with-coverage-policy
                                    (lambda ()
                                      (asdf:test-system name :force coverage-systems))))
                                  (force
                                   (asdf:test-system name :force (systems-under name)))
                                  (t (asdf:test-system name)))
                            (when test
                              (let ((*skip-test-perform* nil))
                                (setf unknown (run-named-test test)))))
                          tails))
                       :box box)))
              :id id :max-output max-output :warnings :pass))))
         (notes (if (getf result :interrupted) (finish-notes (car box) nil) notes))
         (records (append (reverse (car collector)) (fiasco-records fiasco-before)))
         (suite-output (output-tails tails))
         (summary (if records
                      (results-summary records)
                      (summarize-test-output suite-output)))
         (records (or records (output-records summary suite-output))))
    (when unknown
      (setf (getf result :error)
            (list :type "UNKNOWN-TEST" :message unknown :restarts nil :backtrace nil)))
    (let ((outcome (test-outcome summary :error (or build-error (getf result :error)
                                                    (getf result :interrupted))))
          (failures (test-failures records)))
      (append
       (list :system name
             :success (eq outcome :passed)
             :outcome (string-downcase outcome)
             :summary summary
             :failures failures
             :source-files (and failures (ignore-errors
                                          (remove-duplicates
                                           (append (test-source-files name failures)
                                                   (recorded-test-files records))
                                           :test #'equal)))
             ;; The suite's own output, its end: what the server quotes
             ;; of it (its summary, failure and abort lines, last lines).
             :suite-output (subseq suite-output (max 0 (- (length suite-output) 32000))))
       (build-status notes build-error failed flags)
       (list :diagnostics notes)
       (build-result-fields result build-error)))))
