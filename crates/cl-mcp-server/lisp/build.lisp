;;;; build.lisp --- compiling files, loading .asd files and ASDF systems
;;;; with diagnostics.

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
                  :message (concatenate
                            'string
                            (truncate-string (princ-to-string* (swank/backend:message condition))
                                             5000)
                            (or (ignore-errors
                                 (file-error-tried (swank/backend:original-condition condition)))
                                "")))
            (if (getf location :error)
                (list :path nil)
                location))))

(defun build-noise-p (condition)
  "Conditions that say nothing about the user's code: redefinitions the
build asked for (a forced reload redefines everything), and ASDF's own
summaries of a file's compilation (\"Lisp compilation had
style-warnings\", COMPILE-FILE-ERROR), whose diagnostics are listed
already."
  (or (ignorable-warning-p condition)
      (let ((class (find-symbol "COMPILE-CONDITION" "UIOP")))
        (and class (find-class class nil) (typep condition class)))))

(defun build-machinery-frame-p (name)
  "Frames of ASDF and UIOP (and the implementation's loader) around the
user's code in a build backtrace."
  (let* ((symbol (frame-name-symbol name))
         (package (and symbol (symbol-package symbol))))
    (and package
         (let ((pname (package-name package)))
           (or (member pname '("ASDF" "UIOP" "QUICKLISP-CLIENT" "QL-IMPL-UTIL")
                       :test #'string=)
               (and (> (length pname) 5) (string= "ASDF/" pname :end2 5))
               (and (> (length pname) 5) (string= "UIOP/" pname :end2 5))
               (implementation-internal-package-p package)
               (member symbol '(load compile-file)))))))

(defun current-asdf-action ()
  "The ASDF action being performed, as (values OPERATION COMPONENT), or NIL
outside ASDF. Read from ASDF's session (3.3+), defensively (HANDLER-CASE,
not IGNORE-ERRORS, whose second value would be taken for the component)."
  (handler-case
   (let ((session-var (find-symbol "*ASDF-SESSION*" "ASDF/SESSION"))
         (actions (find-symbol "VISITING-ACTION-LIST" "ASDF/SESSION")))
     (when (and session-var actions (boundp session-var) (symbol-value session-var)
                (fboundp actions))
       (let ((action (first (funcall actions (symbol-value session-var)))))
         (when (and (consp action) (typep (cdr action) 'asdf:component))
           (values (car action) (cdr action))))))
    (error () nil)))

(defun action-from-files ()
  "Without ASDF's session (before 3.3: ECL's, CLISP's ASDF), the action
being performed as (values OPERATION-NAME COMPONENT), from the file being
compiled (COMPILE-OP on the source) or loaded (LOAD-OP on its fasl),
looked up among the registered systems' source files; NIL when none."
  (handler-case
      (let* ((compiling (and *compile-file-truename*
                             (namestring (truename *compile-file-truename*))))
             (loading (and (not compiling) *load-truename*
                           (namestring (truename *load-truename*))))
             (target (or compiling loading)))
        (when target
          (dolist (name (asdf:registered-systems))
            (let ((system (asdf:find-system name nil)))
              (labels ((walk (c)
                         (typecase c
                           (asdf:parent-component (mapc #'walk (asdf:component-children c)))
                           (asdf:cl-source-file
                            (let ((file (if compiling
                                            (ignore-errors (asdf:component-pathname c))
                                            (first (ignore-errors
                                                    (asdf:output-files 'asdf:compile-op c))))))
                              (when (and file (equal (ignore-errors (namestring (truename file)))
                                                     target))
                                (return-from action-from-files
                                  (values (if compiling 'asdf:compile-op 'asdf:load-op)
                                          c))))))))
                (when system (walk system)))))))
    (error () nil)))

(defun failed-action-plist (condition)
  "Which ASDF action CONDITION ended: (:operation \"compile-op\" :component
\"sys/file\" :path P), from the condition's own context (UIOP's compile
conditions) or ASDF's current action; NIL when neither is known."
  (multiple-value-bind (operation component)
      ;; Not exported from UIOP before ASDF 3.3 (ECL bundles 3.1).
      (let* ((reader (or (find-symbol "COMPILE-CONDITION-CONTEXT-ARGUMENTS" "UIOP")
                         (find-symbol "COMPILE-CONDITION-CONTEXT-ARGUMENTS" "UIOP/LISP-BUILD")))
             (args (and reader
                        (ignore-errors (funcall reader condition))))
             (action (and (consp args) (first args))))
        (if (and (consp action) (typep (cdr action) 'asdf:component))
            (values (car action) (cdr action))
            (multiple-value-bind (operation component) (current-asdf-action)
              (if component
                  (values operation component)
                  (action-from-files)))))
    (when component
      (list :operation (string-downcase (symbol-name (if (symbolp operation)
                                                         operation
                                                         (type-of operation))))
            :component (format nil "~{~A~^/~}"
                               (ignore-errors (asdf:component-find-path component)))
            :path (let ((p (ignore-errors (asdf:component-pathname component))))
                    (and p (not (uiop:directory-pathname-p p)) (namestring p)))))))

(defun condition-origin (condition)
  "The directory CONDITION is about, from its format arguments (ASDF's own
warnings name the component, or its files): a component's system's
source directory, else a named file's directory; NIL when it names none."
  (let ((found nil))
    (labels ((walk (x depth)
               (cond ((or found (> depth 3)))
                     ((typep x 'asdf:component)
                      (setf found (ignore-errors
                                   (asdf:system-source-directory (asdf:component-system x)))))
                     ((pathnamep x)
                      (setf found (ignore-errors
                                   (make-pathname :name nil :type nil :version nil :defaults x))))
                     ((consp x)
                      (walk (car x) (1+ depth))
                      (walk (cdr x) depth)))))
      (when (typep condition 'simple-condition)
        (walk (simple-condition-format-arguments condition) 0)))
    found))

(defvar *in-test-op* nil
  "True while a system's TEST-OP is performed (test-run.lisp's :AROUND
method): a file-less note then comes from the suite's own compiling at run
time (a test calling COMPILE), not from building the system.")

(defun with-origin (note condition)
  "NOTE (a NOTE-PLIST of CONDITION) with, when it has no file, :ORIGIN: the
directory CONDITION names (CONDITION-ORIGIN: ASDF's own warnings about a
component), else the source directory of the system whose ASDF action is
being performed, so a note from a dependency can be told from the
project's."
  (if (getf note :path)
      note
      (let ((directory
              (or (condition-origin condition)
                  (multiple-value-bind (operation component) (current-asdf-action)
                    (declare (ignore operation))
                    (let ((component (or component (nth-value 1 (action-from-files)))))
                      (and component
                           (ignore-errors (asdf:system-source-directory
                                           (asdf:component-system component)))))))))
        (append note
                (and directory (list :origin (namestring directory)))
                (and *in-test-op* (list :during-test t))))))

(defun drop-restated-notes (notes)
  "NOTES without the ones that restate another note at the same place:
CLISP's compiler repeats each of its notes as a WARNING whose message is
the note's prefixed with \"in FOO in lines 3..5 :\"."
  (remove-if
   (lambda (n)
     (let ((a (getf n :message)))
       (and (stringp a)
            (some (lambda (m)
                    (let ((b (getf m :message)))
                      (and (not (eq m n)) (stringp b)
                           (< (length b) (length a))
                           (equal (getf m :path) (getf n :path))
                           (equal (getf m :line) (getf n :line))
                           (string= b a :start2 (- (length a) (length b))))))
                  notes))))
   notes))

(defun finish-notes (raw error-condition)
  "The diagnostics from RAW, the (original-condition . plist) pairs
CALL-BUILDING collected (newest first): in order, without duplicates (Swank's
hooks may be nested, so one condition can be reported twice) and without
ERROR-CONDITION (the error that ended the build is the build's error, not a
diagnostic too), capped."
  (cap-diagnostics
   (drop-restated-notes
    (remove-duplicates
    (loop for (original . plist) in (reverse raw)
          when (and plist (not (and original (eq original error-condition))))
            collect plist)
    :test #'equal :from-end t))))

(defun collect-build-garbage ()
  "Collect the young generation now. A build conses a lot (a 30-file system:
~150 MB), so the nursery is left part full and the collection it is due
would otherwise land in one of the next evaluations (a 4-20 ms stall);
inside the build it is a small part of the build's time."
  (collect-young-garbage)
  nil)

(defun call-building (thunk &key (backtrace-limit 20) (box (list nil)))
  "Call THUNK (a build: compiling, loading, testing) with Swank's compilation
hooks in one compilation unit, collecting every compiler note whether the
build finishes or not. The first error that reaches the debugger ends the
build inside the compilation unit, so the warnings the compiler defers to
the end of the unit (undefined functions and variables) are still
reported. Returns (values NOTES ERROR FAILED VALUES FLAGS): ERROR is the
condition plist (ASDF's frames dropped from the backtrace, no restarts),
FAILED the action it ended (see FAILED-ACTION-PLIST), VALUES THUNK's values,
FLAGS (:warnings-p :failure-p) as UIOP reported COMPILE-FILE's results for
the files ASDF compiled (failure-p also when the build ended in an error).
The raw notes are collected in (CAR BOX), so a caller whose build is
interrupted (thrown through) still has them (FINISH-NOTES).
Warnings must not be muffled by an outer handler: Swank's hook resignals a
warning first and records it only when the signal returns (so the build
functions run with :WARNINGS :PASS, and the compiler's own report stays in
the captured stderr)."
  (let ((build-error nil) (error-condition nil) (failed nil) (values nil)
        (warnings-p nil) (failure-p nil))
    (flet ((note-compile-result (condition)
             ;; UIOP reports each file's COMPILE-FILE results as these
             ;; conditions: they are the warnings-p and failure-p of the
             ;; build.
             (let ((name (and condition (symbol-name (type-of condition)))))
               (cond ((null name))
                     ((member name '("COMPILE-WARNED-WARNING" "COMPILE-WARNED-ERROR")
                              :test #'string=)
                      (setf warnings-p t))
                     ((member name '("COMPILE-FAILED-WARNING" "COMPILE-FAILED-ERROR"
                                     "COMPILE-FILE-ERROR")
                              :test #'string=)
                      (setf warnings-p t failure-p t))))))
    (with-file-cache ()
      (handler-bind ((warning
                       ;; A forced rebuild redefines everything: those
                       ;; warnings would drown the answer (and stderr).
                       (lambda (w)
                         (when (ignorable-warning-p w)
                           (let ((r (find-restart 'muffle-warning w)))
                             (when r (invoke-restart r))))))
                     (swank/backend:compiler-condition
                       (lambda (c)
                         (let ((original (ignore-errors (swank/backend:original-condition c))))
                           (note-compile-result original)
                           (unless (and original (build-noise-p original))
                             (push (cons original
                                         (let ((plist (ignore-errors (note-plist c))))
                                           (and plist
                                                (or (ignore-errors (with-origin plist original))
                                                    plist))))
                                   (car box)))))))
        (call-with-build-hooks
         (lambda ()
          (with-compilation-unit ()
            (block build
              (flet ((stop (condition &optional hook)
                       (declare (ignore hook))
                       ;; A read error COMPILE-FILE lets through (CLISP's,
                       ;; and CLISP's syntax errors, e.g. (LET ((1 X)))): a
                       ;; located diagnostic too, as SBCL's compiler makes it.
                       (when (read-error-of-compile-p condition)
                         (multiple-value-bind (file offset) (compiling-form-position)
                           (when offset
                             (push (cons nil
                                         (append
                                          (list :severity "error"
                                                :message (print-capped condition 5000))
                                          (location-plist
                                           (list :location (list :file file)
                                                 (list :position (1+ offset))
                                                 nil))))
                                   (car box)))))
                       (setf error-condition condition
                             failed (ignore-errors (failed-action-plist condition))
                             build-error (condition-plist
                                          condition
                                          :backtrace (user-backtrace backtrace-limit nil
                                                                     #'build-machinery-frame-p)))
                       (return-from build nil)))
                (call-with-debugger-hooks
                 #'stop
                 (lambda ()
                   ;; The build's own frames end the backtrace here.
                   (setf values (multiple-value-list
                                 (call-with-user-code
                                  (lambda () (call-seeing-errors-first #'stop thunk))))))))))))))
    (collect-build-garbage)
    (let ((notes (finish-notes (car box) error-condition)))
      (values notes
              build-error
              failed
              values
              ;; ASDF reports COMPILE-FILE's warnings-p only where its
              ;; *COMPILE-FILE-WARNINGS-BEHAVIOUR* asks (not on CLISP): a
              ;; warning among the notes is one too.
              (list :warnings-p (or warnings-p
                                    (and (find-if (lambda (n)
                                                    (member (getf n :severity)
                                                            '("warning" "style-warning")
                                                            :test #'equal))
                                                  notes)
                                         t))
                    :failure-p (or failure-p (and build-error t))))))))

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
        :where (getf result :where)
        :notices (getf result :notices)))

(defun error-note-p (note)
  (equal (getf note :severity) "error"))

(defun build-result-fields (result build-error)
  "RESULT's fields for the reply, with BUILD-ERROR (the error that ended a
build inside CALL-BUILDING) as its :ERROR when it has none of its own."
  (let ((fields (run-fields result)))
    (when (and build-error (null (getf fields :error)))
      (setf (getf fields :error) build-error))
    fields))

(defun compile-file-as-alone (source fasl)
  "Swank's COMPILE-FILE of SOURCE into FASL, with COMPILE-FILE's own
warnings-p and failure-p as a plain COMPILE-FILE outside any compilation
unit reports them: the undefined functions and variables the compiler
defers to the end of the unit count (CALL-BUILDING's unit would otherwise
take them, after COMPILE-FILE returned, and an undefined variable would be
a success). Returns (values OUTPUT WARNINGS-P FAILURE-P)."
  (let ((deferred-warning nil) (deferred-failure nil))
    (multiple-value-bind (output warnings-p failure-p)
        (handler-bind ((warning (lambda (w)
                                  (setf deferred-warning t)
                                  (unless (typep w 'style-warning)
                                    (setf deferred-failure t)))))
          (with-compilation-unit (:override t)
            (swank/backend:swank-compile-file source fasl nil :default)))
      (values output
              (or warnings-p deferred-warning)
              (or failure-p deferred-failure)))))

(defun refused-open-message (path)
  "Why a build ended that a guarded open refused (CALL-WITH-GUARDED-OPENS)."
  (format nil "~A is a named pipe (FIFO) or socket now (it was swapped in after the ~
               server checked the file): the image does not open one while it builds, ~
               since reading it would wait for a writer forever. Nothing was built from ~
               it; compile again once a regular file is there." path))

(defun source-refused (message)
  "The result of a build that did not start because its source file is
not one to open (the fields of COMPILE-FILE-WITH-DIAGNOSTICS)."
  (list :success nil :loaded nil :warnings-p nil :failure-p nil
        :diagnostics nil :stdout "" :stderr ""
        :elapsed-ms 0
        :error (list :type "FILE-ERROR" :message message
                     :restarts nil :backtrace nil)))

(defun compile-file-with-diagnostics (path &key (load t) id (max-output 50000)
                                             file-id)
  "Compile the file PATH (absolute) and, when LOAD, load it.
Returns (:success T-or-NIL :loaded T-or-NIL :warnings-p T-or-NIL
:failure-p T-or-NIL :diagnostics ((:severity S :message S :path P :line N
:column N :offset N :context S)...) :stdout S :stderr S :elapsed-ms N
:error NIL-or-CONDITION-PLIST [:interrupted T :where (...)]).
:WARNINGS-P and :FAILURE-P are COMPILE-FILE's (a full WARNING sets
failure-p, as ASDF treats it); :SUCCESS is a fasl with failure-p false and
no error. The fasl is loaded when it was written and no error-severity
diagnostic was reported, so a file with a full warning is loaded but not a
success. Definitions keep their source locations. FILE-ID, (DEVICE INODE)
of the file the server checked, is checked again on the opened file first
(see SOURCE-FILE-PROBLEM)."
  (let ((notes '()) (success nil) (loaded nil) (compile-error nil)
        (warnings-p nil) (failure-p nil) (build-error nil)
        (*refused-open* nil))
    (unless (probe-file path)
      (return-from compile-file-with-diagnostics
        (source-refused (format nil "No such file: ~A" path))))
    (let ((problem (source-file-problem path file-id)))
      (when problem
        (return-from compile-file-with-diagnostics (source-refused problem))))
    (let ((result
            (fit-build-output (run-captured
             (lambda ()
              (call-with-guarded-opens
               (lambda ()
                ;; The file's relative paths ((load "stub")) mean its
                ;; neighbours, as for `sbcl --load` run from its directory;
                ;; the tests it defines are noted as its (loose-files.lisp).
                (let ((fasl (fasl-path-for path))
                      (*default-pathname-defaults* (file-directory-pathname path))
                      (definitions (test-definitions-snapshot)))
                 (ensure-directories-exist fasl)
                 (multiple-value-bind (collected err failed values)
                     (call-building
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
                                                      :message (condition-report c 5000))
                                                (location-plist
                                                 (list :location (list :file file)
                                                       (list :position (1+ offset))
                                                       nil))))
                                         (return-from compiling nil))))))
                              (compile-file-as-alone (truename path) fasl))))))
                   (declare (ignore failed))
                   (setf build-error err
                         notes (if compile-error
                                   (append collected (list compile-error))
                                   collected))
                   (destructuring-bind (&optional output w-p f-p) values
                     (setf warnings-p (and (or w-p compile-error) t)
                           failure-p (and (or f-p compile-error err) t))
                     (when (and output (not err) (notany #'error-note-p notes))
                       (setf success (not failure-p))
                       (when load
                         (load output)
                         (setf loaded t)
                         (ignore-errors (note-test-definitions definitions path))))))))))
             :id id :max-output max-output :warnings :pass))))
      (when *refused-open*
        (return-from compile-file-with-diagnostics
          (source-refused (refused-open-message *refused-open*))))
      (list* :success (and success (not (getf result :error)) (not (getf result :interrupted)))
             :loaded loaded
             :warnings-p warnings-p
             :failure-p (or failure-p (and (getf result :error) t))
             :diagnostics notes
             (build-result-fields result build-error)))))

;;; An .asd file is loaded as ASDF loads it, not compiled as plain code.

(defun asd-file-p (path)
  (let ((type (pathname-type (pathname path))))
    (and type (string-equal type "asd"))))

(defun systems-defined-in (file)
  "Names of the registered systems whose definition file is FILE."
  (let ((truename (ignore-errors (truename file)))
        (names '()))
    (when truename
      (asdf:map-systems
       (lambda (system)
         (let ((source (ignore-errors (asdf:system-source-file system))))
           (when (and source (equal (ignore-errors (truename source)) truename))
             (push (asdf:component-name system) names))))))
    (sort names #'string<)))

(defun systems-of-asd (file names)
  "The systems the .asd FILE defines: those ASDF registered from it, and
those of NAMES (the names its DEFSYSTEM forms spell out, read by the
server) ASDF knows, defined before or not. Second value: ((NAME SOURCE)
...), those of NAMES ASDF keeps from another file SOURCE (which its search
finds first)."
  (let ((defined (systems-defined-in file))
        (elsewhere '()))
    (dolist (name names)
      (let ((source (registered-source-file name)))
        (when source
          (pushnew name defined :test #'string=)
          (unless (same-file-p source file)
            (push (list name (namestring source)) elsewhere)))))
    (values (sort defined #'string<) (nreverse elsewhere))))

(defun load-asd-with-diagnostics (path &key id (max-output 50000) file-id names)
  "Load the .asd file PATH (absolute) with ASDF:LOAD-ASD, as ASDF does when
it finds the file: in ASDF-USER, its systems registered under their names.
Returns the fields of COMPILE-FILE-WITH-DIAGNOSTICS (:loaded T when the file
loaded) plus :systems, the names of the systems the file defines (NAMES:
those its DEFSYSTEM forms spell out), and :found-elsewhere ((NAME SOURCE)
...), those ASDF keeps from another .asd."
  (let ((notes '()) (build-error nil) (failed nil) (values nil) (flags nil)
        (box (list nil)) (*refused-open* nil))
    (declare (ignorable values failed))
    (unless (probe-file path)
      (return-from load-asd-with-diagnostics
        (compile-file-with-diagnostics path)))
    (let ((problem (source-file-problem path file-id)))
      (when problem
        (return-from load-asd-with-diagnostics (source-refused problem))))
    (let ((result
            (fit-build-output
             (run-captured
              (lambda ()
                (call-with-guarded-opens
                 (lambda ()
                   (setf (values notes build-error failed values flags)
                         (call-building (lambda ()
                                          ;; The name, for ASDF's messages (some
                                          ;; ASDF versions say "system NIL").
                                          (asdf:load-asd (truename path)
                                                         :name (pathname-name path))
                                          t)
                                        :box box)))))
              :id id :max-output max-output :warnings :pass))))
      (when *refused-open*
        (return-from load-asd-with-diagnostics
          (source-refused (refused-open-message *refused-open*))))
      (when (getf result :interrupted)
        (setf notes (finish-notes (car box) nil)))
      (let* ((defined (multiple-value-list (systems-of-asd path names)))
             (ok (and (not build-error) (not (getf result :error))
                      (not (getf result :interrupted))))
             (severities (mapcar (lambda (n) (getf n :severity)) notes))
             ;; As for COMPILE-FILE: a full WARNING or an error fails.
             (failure-p (or (not ok) (getf flags :failure-p)
                            (and (intersection '("error" "warning") severities
                                               :test #'equal)
                                 t))))
        (append
         (list :success (not failure-p)
               :loaded ok
               :warnings-p (or failure-p (getf flags :warnings-p)
                               (and (member "style-warning" severities :test #'equal) t))
               :failure-p failure-p
               :systems (first defined)
               :found-elsewhere (second defined)
               :failed (when build-error
                         (list :reason (failure-reason build-error nil notes)))
               :diagnostics notes)
         (build-result-fields result build-error))))))

(defun quicklisp-available-p ()
  "Whether the real Quicklisp is loaded (QL-DIST is its own; the stand-in
of quicklisp-stand-in.lisp has none)."
  (let ((ql (find-package "QUICKLISP-CLIENT")))
    (and ql (find-package "QL-DIST") (fboundp (find-symbol "QUICKLOAD" ql)))))

(defun system-loaded-p (name)
  (let ((system (asdf:find-system name nil)))
    (and system (asdf:component-loaded-p system) t)))

(defun missing-system-error (name)
  "The error plist for a system ASDF cannot find: a plain answer, not an
error with ASDF's internals as a backtrace."
  (list :type "ASDF/FIND-COMPONENT:MISSING-COMPONENT"
        :message (format nil "ASDF cannot find a system named ~S.~A Check its name, or make its .asd file findable (e.g. push its directory onto ASDF:*CENTRAL-REGISTRY*)." name (system-guess-clause name))
        :restarts nil :backtrace nil))

(defun severity-count (notes severities &optional path)
  (count-if (lambda (n)
              (and (member (getf n :severity) severities :test #'equal)
                   (or (null path) (equal (getf n :path) path))))
            notes))

(defun failure-reason (build-error failed notes)
  "One line saying why a build failed: for ASDF's COMPILE-FILE-ERROR (a
file whose COMPILE-FILE reported failure) the failing file's errors and
warnings, else the error's type and the first line of its message."
  (let* ((type (getf build-error :type))
         (message (or (getf build-error :message) ""))
         (first-line (subseq message 0 (position #\Newline message))))
    (if (and type (search "COMPILE-" type) (search "UIOP" type))
        (let* ((path (getf failed :path))
               (errors (severity-count notes '("error") path))
               (warnings (severity-count notes '("warning") path)))
          (format nil "compile-file reported failure (~D error~:P, ~D warning~:P~@[ in this file~])"
                  errors warnings (and path t)))
        (format nil "~A: ~A" type (truncate-string first-line 500)))))

(defun build-status (notes build-error failed flags)
  "The :WARNINGS-P :FAILURE-P :FAILED fields of a system build: FLAGS from
CALL-BUILDING, and :FAILED (:operation S :component S :path P :reason S)
when an ASDF action failed, :reason alone when the build failed elsewhere."
  (list :warnings-p (getf flags :warnings-p)
        :failure-p (getf flags :failure-p)
        :failed (when build-error
                  (append failed
                          (list :reason (failure-reason build-error failed notes))))))

(defun load-system (name &key force id (max-output 50000))
  "Load the ASDF system NAME (through Quicklisp when it is present and FORCE
is false, so missing dependencies are fetched). Returns (:system S :success
T-or-NIL :via \"asdf\"|\"quicklisp\" :warnings-p T-or-NIL :failure-p
T-or-NIL :failed NIL-or-PLIST :diagnostics (...) :stdout S :stderr S
:elapsed-ms N :error ...) like COMPILE-FILE-WITH-DIAGNOSTICS; the
diagnostics are kept when the build fails (see CALL-BUILDING and
BUILD-STATUS)."
  (let* ((name (string-downcase (string name)))
         (via (if (and (quicklisp-available-p) (not force)) "quicklisp" "asdf"))
         (notes '())
         (build-error nil)
         (failed nil)
         (values nil)
         (flags nil)
         (box (list nil)))
    (declare (ignorable values))
    ;; Without Quicklisp to fetch it, an unknown system is a plain answer,
    ;; not an error with ASDF's internals as a backtrace.
    (when (and (string= via "asdf") (null (ignore-errors (asdf:find-system name nil))))
      (return-from load-system
        (list :system name :success nil :via via :warnings-p nil :failure-p t :failed nil
              :diagnostics nil :stdout "" :stderr ""
              :elapsed-ms 0 :error (missing-system-error name))))
    (let ((result
            (fit-build-output (run-captured
             (lambda ()
               (setf (values notes build-error failed values flags)
                     (call-building
                      (lambda ()
                        (if (string= via "quicklisp")
                            (funcall (find-symbol "QUICKLOAD" "QUICKLISP-CLIENT")
                                     name :silent t)
                            (asdf:load-system name :force (and force t))))
                      :box box)))
             :id id :max-output max-output :warnings :pass))))
      ;; Interrupted (timeout): the diagnostics collected so far.
      (when (getf result :interrupted)
        (setf notes (finish-notes (car box) nil)))
      (append
       (list :system name
             :success (and (not build-error)
                           (not (getf result :error)) (not (getf result :interrupted))
                           (system-loaded-p name))
             :via via)
       (build-status notes build-error failed flags)
       (list :diagnostics notes)
       (build-result-fields result build-error)))))
