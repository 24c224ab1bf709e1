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
        (if directory
            (append note (list :origin (namestring directory)))
            note))))

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
  #+sbcl (sb-ext:gc)
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
                       (when (typep condition '(or reader-error package-error
                                                #+clisp program-error))
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
        :where (getf result :where)))

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
        (warnings-p nil) (failure-p nil) (build-error nil))
    (unless (probe-file path)
      (return-from compile-file-with-diagnostics
        (source-refused (format nil "No such file: ~A" path))))
    (let ((problem (source-file-problem path file-id)))
      (when problem
        (return-from compile-file-with-diagnostics (source-refused problem))))
    (let ((result
            (fit-build-output (run-captured
             (lambda ()
               (let ((fasl (fasl-path-for path)))
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
                                                      :message (print-capped c 5000))
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
                         (setf loaded t)))))))
             :id id :max-output max-output :warnings :pass))))
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

(defun load-asd-with-diagnostics (path &key id (max-output 50000) file-id)
  "Load the .asd file PATH (absolute) with ASDF:LOAD-ASD, as ASDF does when
it finds the file: in ASDF-USER, its systems registered under their names.
Returns the fields of COMPILE-FILE-WITH-DIAGNOSTICS (:loaded T when the file
loaded) plus :systems, the names of the systems the file defines."
  (let ((notes '()) (build-error nil) (failed nil) (values nil) (flags nil)
        (box (list nil)))
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
                (setf (values notes build-error failed values flags)
                      (call-building (lambda ()
                                       ;; The name, for ASDF's messages (some
                                       ;; ASDF versions say "system NIL").
                                       (asdf:load-asd (truename path)
                                                      :name (pathname-name path))
                                       t)
                                     :box box)))
              :id id :max-output max-output :warnings :pass))))
      (when (getf result :interrupted)
        (setf notes (finish-notes (car box) nil)))
      (let* ((ok (and (not build-error) (not (getf result :error))
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
               :systems (systems-defined-in path)
               :failed (when build-error
                         (list :reason (failure-reason build-error nil notes)))
               :diagnostics notes)
         (build-result-fields result build-error))))))

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
      (unless *skip-test-perform* (call-next-method)))))

(defun fiveam-symbol (name)
  (let ((package (find-package "IT.BESE.FIVEAM")))
    (and package (find-symbol name package))))

(defun fiveam-call (name &rest args)
  (apply (fiveam-symbol name) args))

(defun ensure-fiveam-hook ()
  "When FiveAM is loaded, a :BEFORE method on its EXPLAIN (which RUN!,
EXPLAIN! and RUN-ALL-TESTS call with the results of a run) that records the
results while TEST-SYSTEM runs. Installed once."
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
                   (when (and *test-results* (or (null depth) (eql depth 0)))
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
test systems), for finding test forms by name."
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
           (let ((nearest (nearest-names designator names)))
             (values nil (format nil "No FiveAM test or suite named ~S.~@[ Did you mean ~{~A~^, ~}?~] ~
                                      Known (~D): ~{~A~^, ~}~:[~;, ...~]."
                                 designator (mapcar #'qualified-name nearest)
                                 (length names)
                                 (let ((all (sort (mapcar #'qualified-name names) #'string<)))
                                   (subseq all 0 (min 30 (length all))))
                                 (> (length names) 30)))))
          ((rest matches)
           (values nil (format nil "~S names several FiveAM tests: ~{~A~^, ~}; qualify it."
                               designator (mapcar #'qualified-name matches))))
          (t (values (first matches) nil)))))

(defun edit-distance (a b)
  "The Levenshtein distance between the strings A and B, any case."
  (let ((row (make-array (1+ (length b)))))
    (dotimes (j (1+ (length b))) (setf (aref row j) j))
    (dotimes (i (length a))
      (let ((diagonal (aref row 0)))
        (setf (aref row 0) (1+ i))
        (dotimes (j (length b))
          (let ((above (aref row (1+ j))))
            (setf (aref row (1+ j))
                  (min (1+ above) (1+ (aref row j))
                       (+ diagonal (if (char-equal (char a i) (char b j)) 0 1))))
            (setf diagonal above)))))
    (aref row (length b))))

(defun nearest-names (designator names &key (limit 3))
  "The symbols of NAMES nearest to the string DESIGNATOR (its name part,
when qualified) by edit distance, at most LIMIT, the nearest first; only
those within a third of the longer name (at least 2 edits), or holding
DESIGNATOR."
  (let* ((wanted (unqualified designator))
         (scored (loop for name in names
                       for candidate = (symbol-name name)
                       for distance = (edit-distance wanted candidate)
                       when (or (<= distance (max 2 (floor (max (length wanted)
                                                                (length candidate))
                                                           3)))
                                (and (>= (length wanted) 3)
                                     (search wanted candidate :test #'char-equal)))
                         collect (cons distance name))))
    (mapcar #'cdr (subseq (stable-sort (sort scored #'string< :key (lambda (x) (qualified-name (cdr x))))
                                       #'< :key #'car)
                          0 (min limit (length scored))))))

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

(defun test-failures (records system)
  "The failed checks of RECORDS, in the order they ran, as (:test S :suite S
:message S :form S :path P :line N :column N :at S), located in SYSTEM's
(or its test systems') source files by TEST-SOURCE-LOCATOR: at the failed
check, else the test's form or the macro call that made it."
  (let ((locate nil) (seen (make-hash-table :test 'equal)))
    (with-file-cache ()
      (loop for r in records
            when (eq (getf r :status) :failed)
              collect (append (list :test (getf r :test) :suite (getf r :suite)
                                    :message (getf r :message) :form (getf r :form))
                              (let ((name (or (getf r :name)
                                               (and (getf r :test) (unqualified (getf r :test))))))
                                (when name
                                  (unless locate
                                    (setf locate (test-source-locator
                                                  (ignore-errors (project-source-files system)))))
                                  ;; The same expression failing again in one
                                  ;; test is its next check of that form.
                                  (let ((key (list (getf r :test) (getf r :form))))
                                    (ignore-errors
                                     (funcall locate name (getf r :expr)
                                              (1- (incf (gethash key seen 0)))))))))))))

(defun test-system (name &key test force id (max-output 50000))
  "Run (ASDF:TEST-SYSTEM NAME) with output captured (standard input is at
end-of-file, so it never waits). With TEST (a FiveAM test or suite name),
the systems' test actions are skipped (their dependencies still loaded)
and only that test runs (a TEST that names none gives the :error
(:type \"UNKNOWN-TEST\" :message S), S naming the nearest tests). FORCE
rebuilds the system and its test systems (SYSTEMS-UNDER). Returns (:system
S :success T-or-NIL :outcome \"passed\"|\"failed\"|\"error\"|\"unknown\"
:summary NIL-or-(:framework S :passed N :failed N :skipped N) :failures
((:test S :suite S :message S :form S :path P :line N :column N :at S) ...)
:diagnostics (...) :warnings-p :failure-p :failed :stdout S :stderr S
:elapsed-ms N :error ...). The summary and failures come from FiveAM's or
Fiasco's results when they ran (counts are checks), else the summary is
read from the tail of the output (frameworks.lisp). :success is T only for
the outcome \"passed\": no error, a recognised result and no failed check;
output no reader recognises is \"unknown\"."
  (when (null (ignore-errors (asdf:find-system (string-downcase (string name)) nil)))
    (return-from test-system
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
                            (if force
                                (asdf:test-system name :force (systems-under name))
                                (asdf:test-system name))
                            (when test
                              (let ((*skip-test-perform* nil))
                                (setf unknown (run-named-test test)))))
                          tails))
                       :box box)))
              :id id :max-output max-output :warnings :pass))))
         (notes (if (getf result :interrupted) (finish-notes (car box) nil) notes))
         (records (append (reverse (car collector)) (fiasco-records fiasco-before)))
         (summary (if records
                      (results-summary records)
                      (summarize-test-output (output-tails tails)))))
    (when unknown
      (setf (getf result :error)
            (list :type "UNKNOWN-TEST" :message unknown :restarts nil :backtrace nil)))
    (let ((outcome (test-outcome summary :error (or build-error (getf result :error)
                                                    (getf result :interrupted)))))
      (append
       (list :system name
             :success (eq outcome :passed)
             :outcome (string-downcase outcome)
             :summary summary
             :failures (test-failures records name))
       (build-status notes build-error failed flags)
       (list :diagnostics notes)
       (build-result-fields result build-error)))))

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

(defun implementation-source-directories ()
  "Where the Lisp's own sources are, when installed (the SYS logical host's
SRC; and CONTRIB;), and Swank's when SWANK-LOADER loaded it rather than
ASDF: code-find answers paths there."
  (let ((swank (let ((s (and (find-package "SWANK-LOADER")
                             (find-symbol "*SOURCE-DIRECTORY*" "SWANK-LOADER"))))
                 (and s (boundp s) (symbol-value s)))))
    (append
     (loop for logical in '("SYS:SRC;" "SYS:CONTRIB;")
           for dir = (ignore-errors (probe-file (translate-logical-pathname logical)))
           when dir collect (namestring dir))
     (let ((dir (and swank (ignore-errors (probe-file swank)))))
       (when dir (list (namestring dir)))))))

(defun source-directories ()
  "The source directories of the ASDF systems the image has registered and
of the Lisp itself: (:directories (PATH...)). File tools may read there
(code-find points into them)."
  (list :directories
        (remove-duplicates
         (append
          (implementation-source-directories)
          (loop for name in (asdf:registered-systems)
                for dir = (ignore-errors (asdf:system-source-directory name))
                when dir collect (namestring dir)))
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
