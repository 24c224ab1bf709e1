;;;; loose-files.lisp --- code outside any ASDF system: the image's place
;;;; in the project, and the tests of a file (a script, an exercise's test
;;;; file) run as a system's are.

(in-package #:cl-mcp-server)

(eval-when (:compile-toplevel :load-toplevel :execute)
  (require "ASDF"))

;;; The image lives in the project.

(defun enter-project-root (root &key (move t))
  "With MOVE (a local or launched image: ours), make ROOT (a directory
namestring) the process's working directory and *DEFAULT-PATHNAME-DEFAULTS*,
so relative paths in code ((load \"anagram\")) mean the project's files; an
attached image (MOVE false) is the user's and keeps both. A ROOT this image
cannot see (a launcher running it elsewhere) moves nothing. Returns (:cwd S
:defaults S :moved T-or-NIL)."
  (let* ((dir (uiop:ensure-directory-pathname root))
         (moved (and move (ignore-errors (uiop:directory-exists-p dir)) t)))
    (when moved
      (ignore-errors (uiop:chdir dir))
      (setf *default-pathname-defaults* (pathname (namestring dir))))
    (list :cwd (ignore-errors (namestring (uiop:getcwd)))
          :defaults (namestring *default-pathname-defaults*)
          :moved moved)))

(defun file-directory-pathname (path)
  "The directory of the file PATH, as an absolute pathname."
  (make-pathname :name nil :type nil :version nil
                 :defaults (merge-pathnames (pathname path))))

;;; Which tests a file defines: the frameworks' tables before and after it
;;; is loaded. A redefined test or suite is a new object there, so a file
;;; loaded again still defines its tests.

(defun fiveam-table ()
  (let ((s (fiveam-symbol "*TEST*")))
    (and s (boundp s) (hash-table-p (symbol-value s)) (symbol-value s))))

(defun fiasco-table ()
  (let ((s (fiasco-symbol "*TESTS*")))
    (and s (boundp s) (hash-table-p (symbol-value s)) (symbol-value s))))

(defun rt-entries ()
  (let* ((package (find-package "REGRESSION-TEST"))
         (s (and package (find-symbol "*ENTRIES*" package))))
    (and s (boundp s) (copy-list (symbol-value s)))))

(defun table-snapshot (table)
  (let ((pairs '()))
    (when table
      (maphash (lambda (k v) (push (cons k v) pairs)) table))
    pairs))

(defun test-definitions-snapshot ()
  "What the test frameworks have defined now: (:fiveam ALIST :fiasco ALIST
:rt ENTRIES)."
  (list :fiveam (table-snapshot (fiveam-table))
        :fiasco (table-snapshot (fiasco-table))
        :rt (rt-entries)))

(defun defined-since (before table)
  "The keys of TABLE whose value is not the one BEFORE (an alist) had."
  (let ((names '()))
    (when table
      (maphash (lambda (k v)
                 (unless (eq v (cdr (assoc k before)))
                   (push k names)))
               table))
    names))

(defvar *test-definition-files* (make-hash-table :test 'equal)
  "FiveAM test and suite names (symbols) -> the namestring of the file whose
load last defined them (through LISP-COMPILE-FILE or a file's test run), so
a test run by name alone locates its failures in its file.")

(defun note-test-definitions (before file)
  "Record FILE as the file of the FiveAM tests and suites defined since
BEFORE (a TEST-DEFINITIONS-SNAPSHOT). Returns their names."
  (let ((names (and file (defined-since (getf before :fiveam) (fiveam-table)))))
    (dolist (n names names)
      (setf (gethash n *test-definition-files*) (namestring file)))))

(defun call-noting-test-definitions (file thunk)
  "THUNK's values; the FiveAM tests it defines are recorded as FILE's."
  (let ((before (test-definitions-snapshot)))
    (unwind-protect (funcall thunk)
      (ignore-errors (note-test-definitions before file)))))

(defun fiveam-suite-p (object)
  (let ((class (fiveam-symbol "TEST-SUITE")))
    (and class (find-class class nil) (typep object class))))

(defun fiveam-contents (name)
  "The names of the tests and suites in the FiveAM suite NAME, at any depth."
  (let ((seen '()))
    (labels ((walk (n)
               (let ((object (gethash n (fiveam-table))))
                 (when (and (fiveam-suite-p object) (not (member n seen)))
                   (push n seen)
                   (maphash (lambda (k v) (declare (ignore v))
                              (push k seen) (walk k))
                            (fiveam-call "TESTS" object))))))
      (walk name))
    seen))

(defun fiveam-roots (names)
  "Of the FiveAM tests and suites NAMES, those no other of them contains:
running them runs every one once."
  (let ((inside '()))
    (dolist (n names)
      (when (fiveam-suite-p (gethash n (fiveam-table)))
        (dolist (m (remove n (fiveam-contents n)))
          (pushnew m inside))))
    (sort (set-difference names inside) #'string< :key #'qualified-name)))

(defun files-of-tests (names)
  "The files recorded for the FiveAM tests NAMES and everything in them."
  (let ((files '()))
    (dolist (n names)
      (dolist (m (cons n (fiveam-contents n)))
        (let ((f (gethash m *test-definition-files*)))
          (when f (pushnew f files :test #'string=)))))
    (nreverse files)))

(defun recorded-test-files (records)
  "The files recorded for the FiveAM tests of RECORDS (a run's results):
where a suite loaded from a loose file is written, when a system's run
names it (`test` of another system)."
  (let ((files '()))
    (dolist (r records (nreverse files))
      (let* ((name (getf r :name))
             (file (and name (symbolp name) (gethash name *test-definition-files*))))
        (when file (pushnew file files :test #'string=))))))

(defun run-defined-tests (before &key test)
  "Run what the file loaded since BEFORE defines: every FiveAM suite (or
test outside its suites), every package of new Fiasco tests, RT's entries
when the file added some; with TEST, only that FiveAM test or suite.
Returns (values FIVEAM-NAMES-RUN UNKNOWN-MESSAGE NOTHING-DEFINED-P)."
  (ensure-fiveam-hook)
  (if test
      (multiple-value-bind (symbol message) (find-named-test test)
        (if symbol
            (progn (fiveam-call "RUN!" symbol) (values (list symbol) nil nil))
            (values nil message nil)))
      ;; NIL is FiveAM's global suite, new when the file loaded FiveAM:
      ;; it holds every suite of the image, not the file's.
      (let* ((fiveam (fiveam-roots (remove nil (defined-since (getf before :fiveam)
                                                              (fiveam-table)))))
             ;; Fiasco's own packages hold the tests a load of Fiasco
             ;; itself defines.
             (fiasco (remove-if (lambda (p) (eql 0 (search "FIASCO" (package-name p))))
                                (remove-duplicates
                                 (remove nil (mapcar #'symbol-package
                                                     (remove-if-not #'symbolp
                                                                    (defined-since (getf before :fiasco)
                                                                                   (fiasco-table))))))))
             (rt (set-difference (rt-entries) (getf before :rt) :test #'eq)))
        (dolist (n fiveam) (fiveam-call "RUN!" n))
        (when fiasco
          (funcall (fiasco-symbol "RUN-TESTS") fiasco))
        (when rt
          (funcall (find-symbol "DO-TESTS" "REGRESSION-TEST")))
        (values fiveam nil (not (or fiveam fiasco rt))))))

(defun file-source-files (path names)
  "Where the failures of a run of NAMES are looked for: PATH (the file
run, when there is one) and the files recorded for NAMES' definitions."
  (remove-duplicates (append (and path (list (namestring path))) (files-of-tests names))
                     :test #'string= :from-end t))

(defun test-file (path &key test id (max-output 50000) file-id force)
  "Compile and load the file PATH (absolute; as COMPILE-FILE-WITH-DIAGNOSTICS
does, so its diagnostics are a build's) and run the tests it defines (see
RUN-DEFINED-TESTS), or TEST. With PATH NIL, run TEST, a FiveAM test or
suite already defined in the image. Returns RUN-TEST-SYSTEM's plist, with
:file S (or NIL) in place of :system. FORCE changes nothing: the file is
compiled anew each time."
  (declare (ignore force))
  (let* ((before (test-definitions-snapshot))
         (build (and path
                     (compile-file-with-diagnostics path :id id :max-output max-output
                                                         :file-id file-id)))
         (loaded (or (null path) (getf build :loaded))))
    (when (and path (not loaded))
      ;; The file did not build: its diagnostics and error are the answer.
      (return-from test-file
        (append (list :file (namestring path) :success nil :outcome "error"
                      :summary nil :failures nil)
                (list :failure-p t :warnings-p (getf build :warnings-p)
                      :failed (list :reason (if (getf build :error)
                                                (failure-reason (getf build :error) nil
                                                                (getf build :diagnostics))
                                                "the file did not compile: see its errors")
                                    :path (namestring path)))
                (list :diagnostics (getf build :diagnostics))
                (list :stdout (getf build :stdout) :stderr (getf build :stderr)
                      :elapsed-ms (getf build :elapsed-ms)
                      :error (or (getf build :error)
                                 (list :type "COMPILE-FAILED"
                                       :message (format nil "~A did not compile: it has errors (see the diagnostics), so its tests were not run." (namestring path))
                                       :restarts nil :backtrace nil))
                      :interrupted (getf build :interrupted) :where (getf build :where)
                      :notices (getf build :notices)))))
    (when path (ignore-errors (note-test-definitions before path)))
    (let* ((collector (list nil))
           (fiasco-before (fiasco-history))
           (tails (list nil))
           (ran nil) (unknown nil) (nothing nil)
           (result (let ((*test-results* collector))
                     (run-captured
                      (lambda ()
                        (call-copying-output
                         (lambda ()
                           (setf (values ran unknown nothing)
                                 (run-defined-tests before :test test)))
                         tails))
                      :id id :max-output max-output :warnings :pass)))
           (records (append (reverse (car collector)) (fiasco-records fiasco-before)))
           (summary (if records
                        (results-summary records)
                        (summarize-test-output (output-tails tails))))
           (error (getf result :error)))
      (cond (unknown
             (setf error (list :type "UNKNOWN-TEST" :message unknown :restarts nil :backtrace nil)))
            ((and nothing (null summary))
             (setf error (list :type "NO-TESTS"
                               :message (format nil "~A defines no test that FiveAM, Fiasco or RT knows (none was defined or redefined by loading it). Name one with `test`, or check that the file defines its tests at load time." (namestring path))
                               :restarts nil :backtrace nil))))
      (let* ((outcome (test-outcome summary :error (or error (getf result :interrupted))))
             (failures (test-failures records)))
        (list :file (and path (namestring path))
              :success (eq outcome :passed)
              :outcome (string-downcase outcome)
              :summary summary
              :failures failures
              :source-files (and failures (file-source-files path ran))
              :warnings-p (getf build :warnings-p)
              :failure-p (and (not (eq outcome :passed)) t)
              :failed nil
              :diagnostics (getf build :diagnostics)
              :stdout (concatenate 'string (or (getf build :stdout) "") (getf result :stdout))
              :stderr (concatenate 'string (or (getf build :stderr) "") (getf result :stderr))
              :elapsed-ms (+ (or (getf build :elapsed-ms) 0) (getf result :elapsed-ms))
              :error error
              :interrupted (getf result :interrupted)
              :where (getf result :where)
              :notices (append (getf build :notices) (getf result :notices)))))))
