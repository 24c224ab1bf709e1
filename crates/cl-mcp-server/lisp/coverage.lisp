;;;; coverage.lisp --- asdf-test-system with coverage: the project's files
;;;; rebuilt instrumented, the suite run, what it left unexecuted, and the
;;;; instrumentation dropped again. The measuring itself (sb-cover) is in
;;;; impl-sbcl.lisp; this file is the portable flow around it.

(in-package #:cl-mcp-server)

(defparameter *coverage-ranges-per-file* 20
  "Most uncovered ranges sent per file; the rest are counted.")

(defvar *keeping-coverage-marks* nil
  "True while TEST-SYSTEM-WITH-COVERAGE runs: each loaded source file's
coverage marks are kept at once (KEEP-COVERAGE-MARKS).")

(defun ensure-coverage-load-hook ()
  "Install (once, and again after ASDF is reloaded) the :AFTER method on
ASDF:PERFORM of LOAD-OP on a source file that keeps the marks of what the
file's loading ran. Outside a coverage run it does nothing."
  (unless (find-method #'asdf:perform '(:after)
                       (list (find-class 'asdf:load-op) (find-class 'asdf:cl-source-file))
                       nil)
    (defmethod asdf:perform :after ((operation asdf:load-op) (component asdf:cl-source-file))
      (when *keeping-coverage-marks* (keep-coverage-marks)))))

(defun system-source-components (systems)
  "The Lisp source file components of the systems named SYSTEMS."
  (let ((found '()))
    (labels ((walk (c)
               (cond ((typep c 'asdf:cl-source-file) (push c found))
                     ((typep c 'asdf:parent-component)
                      (mapc #'walk (ignore-errors (asdf:component-children c)))))))
      (dolist (n systems)
        (let ((s (ignore-errors (registered-system* n))))
          (when s (walk s)))))
    (nreverse found)))

(defun coverage-source-files (systems)
  "The truenames (namestrings) of SYSTEMS' source files that exist."
  (loop for c in (system-source-components systems)
        for p = (ignore-errors (truename (asdf:component-pathname c)))
        when p collect (namestring p)))

(defun dependency-system-name (spec)
  "The system a :depends-on SPEC names, or NIL for a :feature or :require
dependency (left to ASDF's own run)."
  (cond ((stringp spec) spec)
        ((symbolp spec) (string-downcase (symbol-name spec)))
        ((and (consp spec) (eq (first spec) :version)) (dependency-system-name (second spec)))
        (t nil)))

(defun load-dependencies-plainly (systems)
  "Load what SYSTEMS depend on outside themselves, as usual: only the
project's own files are then compiled under the coverage policy (a
dependency compiled there would leave instrumented fasls in the user's
shared cache)."
  (dolist (n systems)
    (let ((s (ignore-errors (registered-system* n))))
      (when s
        (dolist (spec (asdf:system-depends-on s))
          (let ((dep (dependency-system-name spec)))
            (when (and dep (not (member dep systems :test #'string-equal)))
              (asdf:load-system dep))))))))

(defun drop-instrumented-fasls (systems)
  "Delete the fasls compiled from SYSTEMS' files, so the next load compiles
them again, uninstrumented (ASDF finds its compile outputs missing)."
  (dolist (c (system-source-components systems))
    (dolist (f (ignore-errors (asdf:output-files 'asdf:compile-op c)))
      (ignore-errors (when (probe-file f) (delete-file f))))))

(defun coverage-ranges (lines)
  "LINES ((LINE KIND) ..., ascending) as ranges of consecutive lines of one
kind: ((FIRST LAST KIND) ...)."
  (let ((ranges '()))
    (dolist (l lines (nreverse ranges))
      (destructuring-bind (line kind) l
        (let ((last (first ranges)))
          (if (and last (eq (third last) kind) (= (second last) (1- line)))
              (setf (second last) line)
              (push (list line line kind) ranges)))))))

(defun coverage-file-plist (file)
  "A COVERAGE-REPORT file record as sent: its ranges (the first
*COVERAGE-RANGES-PER-FILE*, with :more counting the rest)."
  (let* ((ranges (coverage-ranges (getf file :lines)))
         (shown (subseq ranges 0 (min (length ranges) *coverage-ranges-per-file*))))
    (list :path (getf file :path)
          :expressions (getf file :expressions)
          :branches (getf file :branches)
          :uncovered (mapcar (lambda (r)
                               (list :line (first r) :end-line (second r)
                                     :kind (string-downcase (third r))))
                             shown)
          :more (- (length ranges) (length shown)))))

(defun test-system-with-coverage (name directory &key test id max-output)
  "TEST-SYSTEM with coverage: NAME's systems (SYSTEMS-UNDER: the system and
its test systems) rebuilt instrumented after their dependencies load as
usual, the tests run, sb-cover's report written into DIRECTORY, then the
coverage data reset and the instrumented fasls deleted (the code loaded
stays until the next load, which compiles the files normally). Adds
:coverage (:index P-or-NIL (NIL: no file to measure, no report written) :files ((:path P :expressions (COVERED TOTAL)
:branches (COVERED TOTAL) :uncovered ((:line N :end-line N :kind
\"not-executed\"|\"one-branch\") ...) :more N) ...)) to the run's plist,
or answers :error COVERAGE-UNSUPPORTED where this Lisp cannot measure."
  (let ((name (string-downcase (string name)))
        (reason (coverage-unsupported-reason)))
    (when reason
      (return-from test-system-with-coverage
        (list :system name :success nil :outcome "error" :summary nil
              :failures nil :diagnostics nil :warnings-p nil :failure-p t :failed nil
              :stdout "" :stderr "" :elapsed-ms 0
              :error (list :type "COVERAGE-UNSUPPORTED" :message reason
                           :restarts nil :backtrace nil))))
    (ensure-coverage-load-hook)
    (let ((systems (systems-under name))
          (*keeping-coverage-marks* t))
      (reset-coverage-data)
      (unwind-protect
           (let* ((run (run-test-system name :test test :id id :max-output max-output
                                              :coverage-systems systems))
                  (files (coverage-source-files systems))
                  (report (and files (coverage-report directory files))))
             (append run
                     (list :coverage
                           (list :index (getf report :index)
                                 :files (mapcar #'coverage-file-plist
                                                (getf report :files))))))
        (reset-coverage-data)
        (drop-instrumented-fasls systems)))))
