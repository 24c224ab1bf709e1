;;;; build.lisp --- compiling files and ASDF systems with diagnostics,
;;;; running test systems, listing and describing systems.

(in-package #:cl-mcp-server)

(eval-when (:compile-toplevel :load-toplevel :execute)
  (require "ASDF"))

(defun severity-name (severity)
  (case severity
    ((:error :read-error) "error")
    (:warning "warning")
    (:style-warning "style-warning")
    (t "note")))

(defun note-plist (condition)
  "A Swank compiler condition as (:severity S :message S :path P :offset N
:line N :column N :context S), :path NIL when it has no file location."
  (let ((location (location-plist (swank/backend:location condition))))
    (append (list :severity (severity-name (swank/backend:severity condition))
                  :message (truncate-string (princ-to-string* (swank/backend:message condition))
                                            5000))
            (if (getf location :error)
                (list :path nil)
                location))))

(defun call-collecting-notes (thunk)
  "Call THUNK with Swank's compilation hooks, collecting compiler notes.
Returns (values notes thunk-values). Warnings must not be muffled by an
outer handler: Swank's hook resignals a warning first and records it only
when the signal returns (so the build functions run with :WARNINGS :PASS,
and the compiler's own report stays in the captured stderr)."
  (let ((notes '()))
    (let ((values
            (with-file-cache ()
              (handler-bind ((swank/backend:compiler-condition
                               (lambda (c)
                                 (push (ignore-errors (note-plist c)) notes))))
                (multiple-value-list
                 (swank/backend:with-compilation-hooks ()
                   (funcall thunk)))))))
      ;; Swank's hooks may be nested (SWANK-COMPILE-FILE adds its own), so
      ;; one condition can be reported twice.
      (values (cap-diagnostics (remove-duplicates (remove nil (reverse notes))
                                                  :test #'equal :from-end t))
              values))))

(defparameter *max-diagnostics* 300
  "At most this many diagnostics are listed per build.")

(defparameter *max-diagnostics-chars* 300000
  "At most this many characters of diagnostic messages per build.")

(defun cap-diagnostics (notes)
  "NOTES cut to *MAX-DIAGNOSTICS* entries and *MAX-DIAGNOSTICS-CHARS*
characters of messages, with a final note saying how many were left out,
so a build with thousands of warnings cannot overflow the reply."
  (let ((kept '()) (chars 0) (count 0) (dropped 0))
    (dolist (n notes)
      (let ((size (+ (length (or (getf n :message) ""))
                     (length (or (getf n :context) "")))))
        (if (or (>= count *max-diagnostics*)
                (> (+ chars size) *max-diagnostics-chars*))
            (incf dropped)
            (progn (push n kept) (incf count) (incf chars size)))))
    (when (plusp dropped)
      (push (list :severity "note" :path nil
                  :message (format nil "[~D more diagnostics]" dropped))
            kept))
    (nreverse kept)))

(defun fit-build-output (result)
  "RESULT (a RUN-CAPTURED plist) with :STDOUT and :STDERR cut to fit the
reply byte budget next to the (capped) diagnostics."
  (let ((fitted (fit-strings (list (getf result :stdout) (getf result :stderr))
                             (floor *reply-byte-budget* 2))))
    (setf (getf result :stdout) (first fitted)
          (getf result :stderr) (second fitted))
    result))

(defun fasl-root ()
  "The private directory fasls go to: CL_MCP_FASL_DIR (a 0700 directory the
server made for its own image), else, in an attached image, the user's own
cache directory. Never a shared temporary directory, where another user
could plant a link or swap a fasl before it is loaded."
  (let ((dir (uiop:getenv "CL_MCP_FASL_DIR")))
    (if (and dir (plusp (length dir)))
        (uiop:ensure-directory-pathname dir)
        (uiop:xdg-cache-home "cl-mcp-server" "fasl/"))))

(defun fasl-path-for (source)
  "Where the fasl of SOURCE goes: a mirror tree under FASL-ROOT, so compiling
never writes into the user's project."
  (let* ((source (truename source))
         (root (fasl-root))
         (relative (make-pathname :directory (cons :relative
                                                   (rest (pathname-directory source)))
                                  :defaults source)))
    (compile-file-pathname (merge-pathnames relative root))))

(defun run-fields (result)
  "The parts of a RUN-CAPTURED result every build reply carries."
  (list :stdout (getf result :stdout)
        :stderr (getf result :stderr)
        :elapsed-ms (getf result :elapsed-ms)
        :error (getf result :error)
        :interrupted (getf result :interrupted)
        :where (getf result :where)))

(defun compile-file-with-diagnostics (path &key (load t) id (max-output 50000))
  "Compile the file PATH (absolute) and, when LOAD, load it.
Returns (:success T-or-NIL :loaded T-or-NIL :diagnostics ((:severity S
:message S :path P :line N :column N :offset N :context S)...) :stdout S
:stderr S :elapsed-ms N :error NIL-or-CONDITION-PLIST [:interrupted T
:where (...)]). Definitions keep their source locations."
  (let ((notes '()) (success nil) (loaded nil) (compile-error nil))
    (unless (probe-file path)
      (return-from compile-file-with-diagnostics
        (list :success nil :loaded nil :diagnostics nil :stdout "" :stderr ""
              :elapsed-ms 0
              :error (list :type "FILE-ERROR"
                           :message (format nil "No such file: ~A" path)
                           :restarts nil :backtrace nil))))
    (let ((result
            (fit-build-output (run-captured
             (lambda ()
               (let ((fasl (fasl-path-for path)))
                 (ensure-directories-exist fasl)
                 (multiple-value-bind (collected values)
                     (call-collecting-notes
                      (lambda ()
                        (let ((*compile-print* nil) (*compile-verbose* nil)
                              (*package* *package*) (*readtable* *readtable*))
                          (block compiling
                            ;; An error the compiler lets through (e.g.
                            ;; IN-PACKAGE of a missing package) ends the
                            ;; compilation as a located diagnostic, not as a
                            ;; Lisp error with compiler-internal frames.
                            (handler-bind
                                ((error
                                   (lambda (c)
                                     (multiple-value-bind (file offset)
                                         (compiling-form-position)
                                       (when offset
                                         (setf compile-error
                                               (append
                                                (list :severity "error"
                                                      :message (print-capped c 5000))
                                                (location-plist
                                                 (list :location (list :file file)
                                                       (list :position (1+ offset))
                                                       nil))))
                                         (return-from compiling nil))))))
                              (swank/backend:swank-compile-file
                               (truename path) fasl nil :default))))))
                   (setf notes (if compile-error
                                   (append collected (list compile-error))
                                   collected))
                   (destructuring-bind (&optional output warnings-p failure-p) values
                     (declare (ignore warnings-p failure-p))
                     ;; SBCL's FAILURE-P is also true for full WARNINGs; the
                     ;; fasl is still good, so only errors count as failure.
                     (setf success (and output
                                        (notany (lambda (n) (equal (getf n :severity) "error"))
                                                notes)))
                     (when (and success load)
                       (load output)
                       (setf loaded t))))))
             :id id :max-output max-output :warnings :pass))))
      (list* :success (and success (not (getf result :error)) (not (getf result :interrupted)))
             :loaded loaded
             :diagnostics notes
             (run-fields result)))))

(defun quicklisp-available-p ()
  (let ((ql (find-package "QUICKLISP-CLIENT")))
    (and ql (fboundp (find-symbol "QUICKLOAD" ql)))))

(defun system-loaded-p (name)
  (let ((system (asdf:find-system name nil)))
    (and system (asdf:component-loaded-p system) t)))

(defun missing-system-error (name)
  "The error plist for a system ASDF cannot find: a plain answer, not an
error with ASDF's internals as a backtrace."
  (list :type "ASDF/FIND-COMPONENT:MISSING-COMPONENT"
        :message (format nil "ASDF cannot find a system named ~S. Check its name, or make its .asd file findable (e.g. push its directory onto ASDF:*CENTRAL-REGISTRY*)." name)
        :restarts nil :backtrace nil))

(defun load-system (name &key force id (max-output 50000))
  "Load the ASDF system NAME (through Quicklisp when it is present and FORCE
is false, so missing dependencies are fetched). Returns (:system S :success
T-or-NIL :via \"asdf\"|\"quicklisp\" :diagnostics (...) :stdout S :stderr S
:elapsed-ms N :error ...) like COMPILE-FILE-WITH-DIAGNOSTICS."
  (let* ((name (string-downcase (string name)))
         (via (if (and (quicklisp-available-p) (not force)) "quicklisp" "asdf"))
         (notes '()))
    ;; Without Quicklisp to fetch it, an unknown system is a plain answer,
    ;; not an error with ASDF's internals as a backtrace.
    (when (and (string= via "asdf") (null (ignore-errors (asdf:find-system name nil))))
      (return-from load-system
        (list :system name :success nil :via via :diagnostics nil :stdout "" :stderr ""
              :elapsed-ms 0 :error (missing-system-error name))))
    (let ((result
            (fit-build-output (run-captured
             (lambda ()
               (setf notes
                     (call-collecting-notes
                      (lambda ()
                        (if (string= via "quicklisp")
                            (funcall (find-symbol "QUICKLOAD" "QUICKLISP-CLIENT")
                                     name :silent t)
                            (asdf:load-system name :force (and force t)))))))
             :id id :max-output max-output :warnings :pass))))
      (list* :system name
             :success (and (not (getf result :error)) (not (getf result :interrupted))
                           (system-loaded-p name))
             :via via
             :diagnostics notes
             (run-fields result)))))

;;; Test summaries.

(defun integer-before (text marker &key (start 0))
  "The integer just before the first MARKER at or after START in TEXT."
  (let ((pos (search marker text :start2 start)))
    (when pos
      (let* ((end (position-if-not (lambda (c) (char= c #\Space)) text
                                   :end pos :from-end t))
             (begin (and end (position-if-not #'digit-char-p text :end (1+ end) :from-end t))))
        (when (and end (digit-char-p (char text end)))
          (parse-integer text :start (if begin (1+ begin) 0) :end (1+ end)))))))

(defun integer-after (text marker &key (start 0))
  "The integer following the first MARKER (spaces allowed) at or after START."
  (let ((pos (search marker text :start2 start)))
    (when pos
      (let* ((begin (position-if-not (lambda (c) (member c '(#\Space #\Tab))) text
                                     :start (+ pos (length marker)))))
        (when (and begin (digit-char-p (char text begin)))
          (values (parse-integer text :start begin :junk-allowed t)))))))

(defun sum-after (text marker)
  "Sum of the integers after every occurrence of MARKER (several suites)."
  (let ((total nil) (start 0))
    (loop for pos = (search marker text :start2 start)
          while pos
          do (let ((n (integer-after text marker :start pos)))
               (when n (setf total (+ (or total 0) n))))
             (setf start (1+ pos)))
    total))

(defun summarize-test-output (text)
  "Pass/fail counts from the summary a known test framework printed:
(:framework S :passed N :failed N :skipped N), or NIL when none is
recognised. FiveAM, Parachute, Rove and lisp-unit2 are known."
  (cond
    ;; FiveAM: " Did 3 checks.\n    Pass: 3 (100%)\n    Skip: 0 ...\n    Fail: 0"
    ((and (search "Did " text) (search "Pass: " text) (search "Fail: " text))
     (list :framework "fiveam"
           :passed (sum-after text "Pass: ")
           :failed (sum-after text "Fail: ")
           :skipped (or (sum-after text "Skip: ") 0)))
    ;; Parachute's plain report: "Passed:  3\nFailed:  0\nSkipped: 0"
    ((and (search "Passed:" text) (search "Failed:" text))
     (list :framework "parachute"
           :passed (sum-after text "Passed:")
           :failed (sum-after text "Failed:")
           :skipped (or (sum-after text "Skipped:") 0)))
    ;; Rove: "✓ 3 tests completed" / "× 1 of 3 tests failed"
    ((search "tests failed" text)
     (let* ((pos (search "tests failed" text))
            (line-start (or (position #\Newline text :end pos :from-end t) 0))
            (line (subseq text line-start pos))
            (failed (integer-after line "× "))
            (total (integer-after line " of ")))
       (list :framework "rove"
             :passed (and failed total (- total failed))
             :failed failed :skipped 0)))
    ((or (search "tests completed" text) (search "test completed" text))
     (list :framework "rove"
           :passed (or (integer-before text "tests completed")
                       (integer-before text "test completed"))
           :failed 0 :skipped 0))
    ;; lisp-unit2: "... 3 assertions, 3 passed, 0 failed ..." style summaries.
    ((and (search " passed" text) (search " failed" text))
     (list :framework "lisp-unit2"
           :passed (integer-before text " passed")
           :failed (integer-before text " failed")
           :skipped 0))
    (t nil)))

(defun test-system (name &key id (max-output 50000))
  "Run (ASDF:TEST-SYSTEM NAME) with output captured (standard input is at
end-of-file, so it never waits). Returns (:system S :success T-or-NIL
:summary NIL-or-(:framework S :passed N :failed N :skipped N) :diagnostics
(...) :stdout S :stderr S :elapsed-ms N :error ...). :success is NIL when
the run signalled an error or the summary shows failures."
  (when (null (ignore-errors (asdf:find-system (string-downcase (string name)) nil)))
    (return-from test-system
      (list :system (string-downcase (string name)) :success nil :summary nil
            :diagnostics nil :stdout "" :stderr "" :elapsed-ms 0
            :error (missing-system-error (string-downcase (string name))))))
  (let* ((name (string-downcase (string name)))
         (notes '())
         (result
           (fit-build-output (run-captured
            (lambda ()
              (setf notes (call-collecting-notes
                           (lambda () (asdf:test-system name)))))
            :id id :max-output max-output :warnings :pass)))
         (summary (summarize-test-output
                   (concatenate 'string (getf result :stdout) (string #\Newline)
                                (getf result :stderr)))))
    (list :system name
          :success (and (not (getf result :error)) (not (getf result :interrupted))
                        (or (null summary) (eql 0 (getf summary :failed))))
          :summary summary
          :diagnostics notes
          :stdout (getf result :stdout)
          :stderr (getf result :stderr)
          :elapsed-ms (getf result :elapsed-ms)
          :error (getf result :error)
          :interrupted (getf result :interrupted)
          :where (getf result :where))))

;;; Listing and describing systems.

;; ASDF >= 3.3 has REGISTERED-SYSTEM; older ones (ECL's bundled ASDF) do
;; not, and FIND-SYSTEM with ERROR-P NIL is the next best lookup.
(defun registered-system* (name)
  (let ((fn (find-symbol "REGISTERED-SYSTEM" "ASDF")))
    (if (and fn (fboundp fn))
        (funcall fn name)
        (asdf:find-system name nil))))

(defun findable-system-names ()
  "Names of systems ASDF can find: registered ones and those its source
registry knows."
  (let ((names (mapcar #'string-downcase (asdf:registered-systems))))
    (ignore-errors
     (asdf:ensure-source-registry)
     (let ((registry-symbol (find-symbol "*SOURCE-REGISTRY*" "ASDF/SOURCE-REGISTRY")))
       (when (and registry-symbol (boundp registry-symbol)
                  (hash-table-p (symbol-value registry-symbol)))
         (maphash (lambda (k v) (declare (ignore v)) (push (string-downcase k) names))
                  (symbol-value registry-symbol)))))
    (sort (remove-duplicates names :test #'string=) #'string<)))

(defun list-systems (&key filter loaded-only (limit 500))
  "Systems ASDF knows: (:count N :systems ((:name S :loaded T-or-NIL
:project T-or-NIL)...)), the project's own first, at most LIMIT entries;
FILTER keeps names containing it (any case)."
  (let* ((project (project-system-names))
         (names (append project
                        (remove-if (lambda (n) (member n project :test #'string=))
                                   (findable-system-names))))
         (names (if filter
                    (remove-if-not (lambda (n) (search filter n :test #'char-equal)) names)
                    names))
         (entries (loop for n in names
                        for loaded = (ignore-errors (let ((s (registered-system* n)))
                                                      (and s (asdf:component-loaded-p s) t)))
                        when (or loaded (not loaded-only))
                          collect (list :name n :loaded loaded
                                        :project (and (member n project :test #'string=) t)))))
    (list :count (length entries)
          :systems (subseq entries 0 (min limit (length entries))))))

(defun dependency-string (dep)
  (if (stringp dep)
      dep
      (let ((*print-case* :downcase)) (prin1-to-string* dep))))

(defun system-info (name)
  "Facts about the ASDF system NAME: (:name S :version S :description S
:long-description S :author S :maintainer S :license S :homepage S
:depends-on (S...) :defsystem-depends-on (S...) :source-file P
:source-directory P :loaded T-or-NIL), or (:error MESSAGE)."
  (let* ((name (string-downcase (string name)))
         (system (handler-case (asdf:find-system name nil)
                   (error (e)
                     (return-from system-info
                       (list :error (format nil "Could not read system ~A: ~A"
                                            name (princ-to-string* e))))))))
    (if (null system)
        (list :error (format nil "ASDF cannot find a system named ~S. Check the source registry or load its .asd file." name))
        (flet ((text (x) (and x (princ-to-string* x))))
          (list :name (asdf:component-name system)
                :version (text (asdf:component-version system))
                :description (text (asdf:system-description system))
                :long-description (and (asdf:system-long-description system)
                                       (truncate-string (text (asdf:system-long-description system)) 5000))
                :author (text (asdf:system-author system))
                :maintainer (text (asdf:system-maintainer system))
                :license (text (asdf:system-licence system))
                :homepage (text (ignore-errors (asdf:system-homepage system)))
                :depends-on (mapcar #'dependency-string (asdf:system-depends-on system))
                :defsystem-depends-on (mapcar #'dependency-string
                                              (asdf:system-defsystem-depends-on system))
                :source-file (text (asdf:system-source-file system))
                :source-directory (text (asdf:system-source-directory system))
                :loaded (and (asdf:component-loaded-p system) t))))))

(defun source-directories ()
  "The source directories of the ASDF systems the image has registered:
(:directories (PATH...)). File tools may read there (code-find points into
them)."
  (list :directories
        (remove-duplicates
         (loop for name in (asdf:registered-systems)
               for dir = (ignore-errors (asdf:system-source-directory name))
               when dir collect (namestring dir))
         :test #'string=)))

(defun complete-names (kind prefix &key package (limit 100))
  "Names of KIND (\"package\", \"symbol\" or \"system\") starting with
PREFIX (any case), sorted: (:values (S...) :total N). Symbols are those
accessible in PACKAGE (default CL-USER); system names come from ASDF."
  (let* ((prefix (or prefix ""))
         (names
           (cond
             ((string-equal kind "package")
              (loop for p in (list-all-packages)
                    append (cons (package-name p) (package-nicknames p))))
             ((string-equal kind "symbol")
              (multiple-value-bind (pkg err) (resolve-package (or package "CL-USER"))
                (when err (return-from complete-names (list :error err)))
                (let ((acc '()))
                  (do-symbols (s pkg) (push (symbol-name s) acc))
                  acc)))
             ((string-equal kind "system") (findable-system-names))
             (t (return-from complete-names
                  (list :error (format nil "Unknown kind ~S." kind))))))
         (matching (sort (remove-duplicates
                          (remove-if-not (lambda (n)
                                           (and (>= (length n) (length prefix))
                                                (string-equal prefix n :end2 (length prefix))))
                                         names)
                          :test #'string=)
                         #'string<)))
    (list :values (subseq matching 0 (min limit (length matching)))
          :total (length matching))))
