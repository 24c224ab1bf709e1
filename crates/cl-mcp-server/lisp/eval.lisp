;;;; eval.lisp --- evaluate-lisp: read and evaluate code like a REPL would;
;;;; the code arguments of the inspector and the profiler, read and run alike.

(in-package #:cl-mcp-server)

(defvar *session-packages* (make-hash-table :test 'equal)
  "Session id (a string, or NIL for the default session) -> package name:
the *PACKAGE* an evaluation left behind, so the next one starts there.")

(defvar *session-lock* (swank/backend:make-lock :name "cl-mcp sessions"))

(defun session-package (&optional session)
  "The current package of SESSION (COMMON-LISP-USER until an evaluation
changes it, or when the remembered package was deleted)."
  (let ((name (swank/backend:call-with-lock-held
               *session-lock* (lambda () (gethash session *session-packages*)))))
    (or (and name (find-package name))
        (find-package "COMMON-LISP-USER"))))

(defun set-session-package (session package)
  (swank/backend:call-with-lock-held
   *session-lock*
   (lambda () (setf (gethash session *session-packages*) (package-name package)))))

(defun print-values (values &key print-level print-length print-readably
                              (max-output 50000))
  "Each of VALUES printed with PRIN1 under the caller's print controls, all
of them together capped at MAX-OUTPUT characters; a value whose printing
fails is shown as #<error printing ...> instead of failing the call.
Without PRINT-LENGTH, *PRINT-CIRCLE* is true for a value whose conses or
arrays share structure, so a circular value prints as #1=(1 2 . #1#)
rather than until the cap."
  (let ((budget max-output))
    (loop for value in values
          collect (if (<= budget 0)
                      "#<value not printed: output limit reached>"
                      (let ((out (make-capture-stream budget
                                                      :stop-after (* 10 max-output))))
                        (prog1
                            (handler-case
                                (let ((*print-level* print-level)
                                      (*print-length* print-length)
                                      (*print-readably* print-readably)
                                      (*print-circle* (and (null print-length)
                                                           (shares-structure-p value))))
                                  ;; A circular value would print forever.
                                  (catch 'capture-full (prin1 value out))
                                  (capture-contents out))
                              (error (e)
                                (format nil "#<error printing value of type ~A: ~A>"
                                        (type-name value) (print-capped e 2000)))
                              ;; Nested deeper than the stack: unwound
                              ;; before this clause runs.
                              (storage-condition (c)
                                (if (stack-exhaustion-p c)
                                    (format nil "#<~A too deep to print: printLevel (e.g. 20) prints it truncated>"
                                            (type-name value))
                                    (error c))))
                          (decf budget (slot-value out 'written))))))))

(defun fit-eval-reply (values stdout stderr warnings error)
  "VALUES, STDOUT, STDERR, WARNINGS and ERROR's message cut so that the
reply stays within *REPLY-BYTE-BUDGET* bytes. Returns them as 5 values."
  (let* ((message (and error (getf error :message)))
         (fitted (fit-strings (append (list stdout stderr message) values warnings)
                              *reply-byte-budget*))
         (error (if message
                    (let ((e (copy-list error)))
                      (setf (getf e :message) (third fitted))
                      e)
                    error)))
    (values (subseq fitted 3 (+ 3 (length values)))
            (first fitted) (second fitted)
            (nthcdr (+ 3 (length values)) fitted)
            error)))

;; Long: reading, evaluating and REPL variables of one request inside one compilation unit and its handlers.
(defun eval-request (code &key package session id print-level print-length
                            print-readably safe-read stdin (max-output 50000)
                            (backtrace-limit 20) debug)
  "Read and evaluate the forms of CODE one at a time, like a REPL.

PACKAGE (a name) is where reading starts, for this call only; without it,
the package SESSION's previous evaluation left. `(in-package ...)' among
the forms affects the forms after it, and a *PACKAGE* the code changed is
remembered for SESSION. :package is SESSION's package after the call.
SAFE-READ binds *READ-EVAL* to NIL. STDIN is the whole standard input
(end-of-file right away without it). ID names this evaluation for
INTERRUPT-EVALUATION and EVAL-STATUS. With DEBUG, an error (or BREAK,
INVOKE-DEBUGGER) suspends the evaluation in Swank's debugger (see
debug.lisp) instead of returning it as :error.

Returns (:values (STRING...) :stdout S :stderr S :warnings (S...)
:package NAME :elapsed-ms N :error NIL-or-(:type :message :restarts
:backtrace ((INDEX FRAME)...)) [:interrupted T :where (FRAME...)]).
:values are the printed values of the last form."
  (multiple-value-bind (start-package package-error) (resolve-package package)
    (when package-error
      (return-from eval-request
        (list :values nil :stdout "" :stderr "" :warnings nil
              :package (package-name (session-package session)) :elapsed-ms 0
              :error (list :type "PACKAGE-ERROR" :message package-error
                           :restarts nil :backtrace nil))))
    (let* ((current (or start-package (session-package session)))
           (last-values '())
           (printed '())
           (print-package *package*)
           (reading nil)
           (form-error nil)
           (ran 0)
           (result
             (run-captured
              (lambda ()
               (block eval-thunk
                (let ((*package* current)
                      (eof (list :eof))
                      (outer-restarts (compute-restarts)))
                  ;; One compilation unit for all forms, so a function
                  ;; defined after its caller raises no undefined-function
                  ;; warning; its end-of-unit summary is not user output.
                  (let ((stderr *error-output*)
                        (*error-output* (make-broadcast-stream)))
                   (with-compilation-unit ()
                    (let ((*error-output* stderr))
                    ;; An error ends the forms inside the unit (not by
                    ;; unwinding out of it), so the warnings it defers
                    ;; (undefined functions of the forms before) are
                    ;; still signalled and collected.
                    (block forms
                     (call-with-debugger-hooks
                      (lambda (condition hook)
                        (declare (ignore hook))
                        ;; Code that does not read is answered, not
                        ;; debugged: nothing of the user's runs there.
                        (when (and debug (not reading))
                          (enter-debugger condition))
                        (setf form-error
                              (condition-plist condition
                                               :backtrace (user-backtrace backtrace-limit)
                                               :restarts (restarts-since condition
                                                                         outer-restarts)))
                        (when reading
                          (setf (getf form-error :message)
                                (reader-problem-message condition)))
                        (return-from forms nil))
                      (lambda ()
                    (let ((in (make-string-input-stream code)))
                      (loop
                        (let ((form (let ((*read-eval* (not safe-read)))
                                      (setf reading t)
                                      (prog1 (read in nil eof)
                                        (setf reading nil)))))
                          (when (eq form eof) (return))
                          (setf last-values
                                (multiple-value-list
                                 (call-with-user-code (lambda () (eval form)))))
                          (incf ran)
                          (setf current *package*)
                          ;; REPL variables, as a listener would set them.
                          (setf *** ** ** * * (first last-values))
                          (setf /// // // / / last-values)
                          (setf +++ ++ ++ + + form))))))))))
                  (when form-error
                    (return-from eval-thunk (values)))
                  (setf current *package*)
                  ;; Printing the values runs user code too (PRINT-OBJECT
                  ;; methods): inside the evaluation, so a timeout or
                  ;; image-interrupt stops it like the evaluation itself.
                  (setf printed
                        (let ((*package* print-package))
                          (print-values last-values :print-level print-level
                                                    :print-length print-length
                                                    :print-readably print-readably
                                                    :max-output max-output)))
                  (values))))
              :id id :max-output max-output :stdin stdin
              :backtrace-limit backtrace-limit :debug debug)))
      ;; A per-call PACKAGE applies to this call only; the session moves
      ;; only when the code itself changed *PACKAGE* (IN-PACKAGE).
      (unless (and start-package (eq current start-package))
        (set-session-package session current))
      (let ((error (or (getf result :error) form-error)))
        ;; A reader error's backtrace is the reader's inside: useless.
        ;; The forms before the one that does not read did run: said.
        (when (and error reading)
          (setf (getf error :backtrace) nil)
          (when (plusp ran)
            (setf (getf error :message)
                  (format nil "~A~%(The ~D form~:P before it ran.)"
                          (getf error :message) ran))))
        (multiple-value-bind (values stdout stderr warnings error)
            (fit-eval-reply (if (or error (getf result :interrupted))
                                nil
                                printed)
                            (getf result :stdout) (getf result :stderr)
                            (getf result :warnings) error)
        (append
         (list :values values
               :stdout stdout
               :stderr stderr
               :warnings warnings
               :package (package-name (session-package session))
               :elapsed-ms (getf result :elapsed-ms)
               :error error)
         (when (getf result :notices)
           (list :notices (getf result :notices)))
         (when (getf result :interrupted)
           (list :interrupted t :where (getf result :where)))))))))

(defun implementation-features ()
  (mapcar #'prin1-to-string* *features*))

(defun image-info (&optional session)
  "Facts about this image: (:implementation S :version S :pid N :features
(S...) :swank-version S :package S :asdf-version S :loaded-systems N
:machine S :memory PLIST)."
  (let ((asdf (find-package "ASDF")))
    (list :implementation (lisp-implementation-type)
          :version (lisp-implementation-version)
          :pid (current-pid)
          :features (implementation-features)
          :swank-version (let ((s (find-symbol "*SWANK-WIRE-PROTOCOL-VERSION*" "SWANK")))
                           (and s (boundp s) (princ-to-string* (symbol-value s))))
          :package (package-name (session-package session))
          :asdf-version (and asdf
                             (let ((f (find-symbol "ASDF-VERSION" asdf)))
                               (and f (fboundp f) (funcall f))))
          :loaded-systems (and asdf
                               (let ((f (find-symbol "ALREADY-LOADED-SYSTEMS" asdf)))
                                 (and f (fboundp f) (length (funcall f)))))
          :machine (format nil "~A ~A" (machine-type) (software-type))
          :memory (gc-and-heap-info))))

;;; Reading and running user forms.

(defun run-user-forms (code &key session package id max-output compile
                                 (around #'funcall))
  "Read and evaluate CODE's forms in SESSION's package (or PACKAGE) as user
code through RUN-CAPTURED (interruptible by ID). With COMPILE, the forms
are compiled into one function first (what a profile should measure).
AROUND is called with a function that runs the forms (to profile them).
Returns RUN-CAPTURED's plist; :value holds the last form's values. Code
that does not read is an error said as evaluate-lisp says it, without the
reader's backtrace."
  (multiple-value-bind (start-package package-error) (resolve-package package)
    (if package-error
        (list :error (list :type "PACKAGE-ERROR" :message package-error
                           :restarts nil :backtrace nil)
              :stdout "" :stderr "" :warnings nil :elapsed-ms 0)
        (let* ((package (or start-package (session-package session)))
               (unreadable nil)
               (result
                 (run-captured
                  (lambda ()
                    (let ((*package* package))
                      (flet ((read-noting (thunk)
                               (handler-bind ((error (lambda (e)
                                                       (setf unreadable
                                                             (reader-problem-message e)))))
                                 (prog1 (funcall thunk) (setf unreadable nil)))))
                        (if compile
                            (funcall around
                                     (compile nil `(lambda ()
                                                     ,@(read-noting
                                                        (lambda () (read-forms code package))))))
                            ;; Read one form at a time, like evaluate-lisp, so an
                            ;; IN-PACKAGE among them affects the forms after it.
                            (funcall around
                                     (lambda ()
                                       (let ((values '())
                                             (eof (list :eof)))
                                         (with-input-from-string (in code)
                                           (loop for form = (read-noting (lambda () (read in nil eof)))
                                                 until (eq form eof)
                                                 do (setf values (multiple-value-list (eval form)))))
                                         (values-list values))))))))
                  :id id :max-output (or max-output 50000))))
          (when (and unreadable (getf result :error))
            (setf (getf (getf result :error) :message) unreadable
                  (getf (getf result :error) :backtrace) nil))
          result))))

(defun run-failure (result)
  "The :error or interruption of a RUN-USER-FORMS result as a reply
fragment, or NIL when it returned normally."
  (cond ((getf result :interrupted)
         (list :interrupted t :where (getf result :where)
               :stdout (getf result :stdout) :stderr (getf result :stderr)))
        ((getf result :error)
         (list :error (getf result :error)
               :stdout (getf result :stdout) :stderr (getf result :stderr)))))
