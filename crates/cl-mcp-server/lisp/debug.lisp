;;;; debug.lisp --- a debugger that waits: reading and driving a suspended
;;;; evaluation.
;;;;
;;;; An evaluation run with :debug t (EVAL-REQUEST, RUN-CAPTURED) that
;;;; reaches the debugger sits in Swank's SLDB loop on its own thread (see
;;;; ENTER-DEBUGGER). The functions here are sent to that thread (an
;;;; :emacs-rex with its thread id), so they run inside the debugger's
;;;; dynamic extent: Swank's *SLDB-RESTARTS*, *SWANK-DEBUGGER-CONDITION* and
;;;; its frame numbering (0 = the top of the stack the debugger saw) apply.

(in-package #:cl-mcp-server)

(defmacro with-debugger-errors (() &body body)
  "Run BODY; an error in it is returned as (:error MESSAGE) instead of
entering a nested debugger level (for the functions that only look)."
  `(handler-case (progn ,@body)
     (error (e) (list :error (print-capped e 2000)))))

(defun debugger-restarts ()
  "The restarts of the current debugger level as a list of (INDEX
RESTART): Swank's numbering, cut after this evaluation's own ABORT
restart (the ones past it belong to Swank's request loop)."
  (let* ((all swank::*sldb-restarts*)
         (ours (and *current-evaluation*
                    (evaluation-abort-restart *current-evaluation*)))
         (end (or (and ours (position ours all)) (1- (length all)))))
    (loop for r in all
          for i from 0 to end
          collect (list i r))))

(defun debugger-restart-report (restart)
  "RESTART's report, with the one Swank gives a nested level's ABORT
(\"Return to sldb level N.\", SLDB being Emacs's debugger buffer) said
in the debugger tools' words."
  (let ((text (print-capped restart 1000))
        (swank-prefix "Return to sldb level "))
    (if (and (eq (restart-name restart) 'abort)
             (eql 0 (search swank-prefix text)))
        (format nil "Leave this error and return to debugger level ~A"
                (subseq text (length swank-prefix)))
        text)))

(defun debugger-restart-plists ()
  (loop for (i r) in (debugger-restarts)
        collect (list :index i
                      :name (let ((n (restart-name r)))
                              (if n (type-name-of-symbol n) ""))
                      :description (debugger-restart-report r))))

(defun symbol-from-text (text)
  "The existing symbol TEXT names (PKG::NAME, PKG:NAME or NAME in
CL-USER), or NIL; never interns."
  (let* ((colon (position #\: text))
         (package (if colon
                      (find-package (string-upcase (subseq text 0 colon)))
                      (find-package "COMMON-LISP-USER")))
         (name (string-upcase (string-left-trim ":" (if colon (subseq text colon) text)))))
    (and package (plusp (length name)) (find-symbol name package))))

(defun frame-text (frame &optional call)
  "FRAME printed; CALL, when given, is shown instead: a string, or a list
printed (a traced call whose wrapper frame stands for it,
TRACED-CALL-FRAME)."
  (when (stringp call)
    (return-from frame-text call))
  (handler-case
      (let ((*print-length* 10) (*print-level* 4)
            (*print-readably* nil) (*print-pretty* nil)
            (s (make-capture-stream 400 :stop-after 400)))
        (catch 'capture-full
          (if call (prin1 call s) (print-frame-text frame s)))
        (truncate-string (substitute #\Space #\Newline (capture-contents s)) 400))
    (error () "#<frame>")))

(defun evaluated-in-frame-text (text)
  "For the frame of code the debugger tools evaluated in a frame (SBCL
compiles it into a (LAMBDA (#:G..)) of that frame's debug frame, printed
as #<SB-DI::COMPILED-FRAME NAME> or, when the code uses no local, as
#<unused argument>), what it is, in words; else NIL."
  (let ((marker "#<SB-DI::COMPILED-FRAME "))
    (when (and (stringp text) (eql 0 (search "((LAMBDA (#:G" text)))
      (let ((at (search marker text)))
        (cond (at
               (let* ((start (+ at (length marker)))
                      (end (or (position-if (lambda (c) (member c '(#\> #\{))) text
                                            :start start)
                               (length text))))
                 (format nil "(code evaluated in the frame of ~A)"
                         (string-trim " " (subseq text start end)))))
              ((search "#<unused argument>)" text)
               "(code evaluated in a frame)"))))))

(defun debugger-user-frames (&optional (limit 500))
  "The user's frames of the current debugger level as (INDEX FRAME): the
stack is cut where the evaluation's user code was entered, and the
debugger's, Swank's and our own frames (and the signalling machinery) are
left out. INDEX is Swank's frame number."
  (let ((frames (swank/backend:compute-backtrace 0 limit))
        (inner nil)
        (user '()))
    (loop for frame in frames
          for i from 0
          for (name text) = (multiple-value-list (frame-view frame))
          until (sentinel-frame-p name)
          do (multiple-value-bind (traced call) (traced-call-frame frame inner)
               (setf inner name)
               (cond ((or (eq traced :hide) (eq name :skip)))
                     ;; The tracer's wrapper stands for a call whose own
                     ;; frame is gone.
                     (traced (push (list i frame call) user))
                     (t
                      (let ((full (or text (frame-text frame))))
                        (unless (machinery-frame-p name full)
                          (push (list i frame (or (evaluated-in-frame-text full) text))
                                user)))))))
    (nreverse user)))

(defun frame-location (index)
  "(:path P :line L :column C :offset O) of frame INDEX, or NIL. The
position is moved past whitespace to the form itself (SBCL may point at
the whitespace before it)."
  (let ((loc (ignore-errors
              (location-plist (swank/backend:frame-source-location index)
                              :octets t))))
    (when (and loc (getf loc :path) (getf loc :line))
      (let* ((text (cached-file-text (getf loc :path)))
             (offset (getf loc :offset))
             (start (and text offset
                         (position-if-not (lambda (c) (member c '(#\Space #\Tab #\Newline #\Return)))
                                          text :start (min offset (length text))))))
        (when (and start (/= start offset))
          (multiple-value-bind (line column) (offset-line-column text start)
            (setf loc (list :path (getf loc :path) :offset start :line line :column column)))))
      loc)))

(defun frame-plist (index frame &key location call)
  (append (list :index index :frame (frame-text frame call))
          ;; A traced call's wrapper frame is at the tracer's source.
          (when (and location (not call))
            (let ((loc (frame-location index)))
              (when loc
                (list :path (namestring (getf loc :path))
                      :line (getf loc :line)
                      :column (getf loc :column)))))))

(defun debugger-state (&key (start 0) (count 20))
  "The current debugger level: (:level N :type S :message S :restarts
((:index I :name S :description S) ...) :frames ((:index I :frame S
[:path P :line L :column C]) ...) :total-frames N). Frames are the user's
(DEBUGGER-USER-FRAMES): COUNT of them from frame number START on (frames
keep Swank's numbers, with gaps where machinery frames are left out)."
  (with-debugger-errors ()
  (let* ((condition swank::*swank-debugger-condition*)
         (frames (debugger-user-frames))
         (from (member-if (lambda (f) (>= (first f) start)) frames))
         (page (subseq from 0 (min (length from) (max 0 count)))))
    (with-file-cache ()
      (list :level swank::*sldb-level*
            :type (type-name condition)
            :message (condition-message condition)
            :restarts (debugger-restart-plists)
            :frames (loop for (i f call) in page
                          collect (frame-plist i f :location t :call call))
            :total-frames (length frames)
            :actions (debugger-actions))))))

(defun debugger-actions ()
  "The debugger-restart actions this Lisp can carry out, as their names:
those its Swank backend lacks (BACKEND-OPERATION-PROBLEM) and stepping
without a stepper are left out, so the hint after a debugger's text
offers nothing that would be refused."
  (append (list "abort" "continue")
          (unless (backend-operation-problem :return) (list "return"))
          (unless (backend-operation-problem :restart) (list "restart"))
          (when (stepper-available-p) (list "step" "next" "out"))))

(defun debugger-evaluation-output ()
  "What the evaluation suspended in this debugger printed so far, its
package and time: (:stdout S :stderr S :package S :elapsed-ms N), or NIL
in a debugger that is not an evaluation's."
  (let ((e *current-evaluation*))
    (when e
      (list :stdout (capture-contents (evaluation-stdout e))
            :stderr (capture-contents (evaluation-stderr e))
            :package (package-name (or (evaluation-package e) *package*))
            :elapsed-ms (milliseconds-since (evaluation-start e))))))

(defun form-text-at (path offset &optional (limit 2000))
  "The text of the form that starts at character OFFSET of the file PATH,
capped at LIMIT characters."
  (let ((text (cached-file-text path)))
    (when (and text (< offset (length text)))
      (let ((end (handler-case
                     (let ((*read-suppress* t))
                       (nth-value 1 (read-from-string text nil nil :start offset)))
                   (error () nil))))
        (truncate-string (subseq text offset (or end (min (length text) (+ offset limit))))
                         limit)))))

(defun listed-frame (index)
  "(values FRAME NIL CALL) when INDEX (Swank's numbering) is one of the
frames this debugger level lists (DEBUGGER-USER-FRAMES; CALL as FRAME-TEXT
takes it), else (values NIL (:error MESSAGE)). The frames left out are the debugger's, Swank's, the
server's and the implementation's: code run or a restart made there acts
on the tools themselves (on ECL, code in an anonymous frame of Swank's
opened a nested level)."
  (let* ((frames (debugger-user-frames))
         (entry (and (integerp index) (assoc index frames))))
    (if entry
        (values (second entry) nil (third entry))
        (values nil (unlisted-frame-error index frames)))))

(defun unlisted-frame-error (index frames)
  "(:error MESSAGE) for frame number INDEX, not among FRAMES (the listed
ones, DEBUGGER-USER-FRAMES), naming those."
  (list :error
        (if frames
            (format nil "There is no frame ~A among those debugger level ~D lists: ~{~A~^, ~}~:[~;, ...~] (the frames left out are the debugger's, Swank's, the server's and the Lisp's own). Frame numbers change with the level; debugger-backtrace lists the current ones."
                    index swank::*sldb-level*
                    (loop for (i frame call) in frames
                          repeat 6
                          collect (format nil "~D ~A" i (frame-text frame call)))
                    (> (length frames) 6))
            (format nil "There is no frame ~A: debugger level ~D lists no frame of the user's code (the condition was signalled directly by the evaluated form), so there is none to look into or act on. debugger-frame without `frame` runs `code` in the debugger; debugger-restart chooses a restart."
                    index swank::*sldb-level*))))

(defun lisp-name ()
  "This Lisp's short name, for messages."
  (let ((type (lisp-implementation-type)))
    (if (search "Armed Bear" type) "ABCL" type)))

(defun backend-operation-problem (operation)
  "(:error MESSAGE) when this Lisp's Swank backend cannot do OPERATION
(:eval code in a frame, :return from a frame, :restart a frame), saying
what is left to do; else NIL. Asked before the operation: the backend's
own refusal is an error that would open a nested debugger level."
  (let ((interface (ecase operation
                     (:eval 'swank/backend:eval-in-frame)
                     (:return 'swank/backend:return-from-frame)
                     (:restart 'swank/backend:restart-frame))))
    (when (member interface swank/backend::*unimplemented-interfaces*)
      (list :error
            (format nil "~A cannot ~A: its Swank backend has no ~(~A~). ~A~@[ The debugger stays at level ~D.~]"
                    (lisp-name)
                    (ecase operation
                      (:eval "evaluate code in a frame")
                      (:return "return a value from a frame")
                      (:restart "restart a frame"))
                    (symbol-name interface)
                    (ecase operation
                      (:eval "debugger-frame without `code` shows the frame's locals; evaluate-lisp runs code outside the debugger, with values copied from them.")
                      (:return "Choose one of the listed restarts (debugger-restart), e.g. use-value where it is offered.")
                      (:restart "Fix the function, then abort (debugger-restart with action abort) and call it again with evaluate-lisp."))
                    ;; debugger-restart says so itself.
                    (and (eq operation :eval) swank::*sldb-level*))))))

(defun frame-operation-error (operation index frame)
  "(:error MESSAGE) when this Lisp cannot do OPERATION (:return, :restart)
on FRAME, number INDEX (FRAME-OPERATION-PROBLEM), else NIL."
  (let ((why (frame-operation-problem operation index frame)))
    (and why (list :error why))))

(defun frame-code-problem (index)
  "Why code cannot run in frame INDEX now, as (:error MESSAGE), or NIL:
not a listed frame, a backend that cannot, an exhausted stack. INDEX NIL
is no frame (the debugger's own context, EVAL-FORMS-IN-FRAME)."
  (or (and index (nth-value 1 (listed-frame index)))
      (and index (backend-operation-problem :eval))
      (exhausted-stack-problem)))

(defun local-name (name)
  "A frame local's name as shown: a symbol's name; ECL names a compiled
frame's variables by strings such as \"CL-USER::X\", shown as X."
  (if (symbolp name)
      (symbol-name name)
      (let* ((text (princ-to-string* name))
             (colon (position #\: text :from-end t)))
        (if colon (subseq text (1+ colon)) text))))

(defun debugger-frame (index &key (max-locals 50) (max-value 500))
  "Frame INDEX: (:index I :frame S :path P :line L :column C :form S
:locals ((:name S :value S) ...) :more-locals N :catch-tags (S ...)), or
(:error MESSAGE) for a frame that does not exist."
  (with-debugger-errors ()
  (multiple-value-bind (frame problem call) (listed-frame index)
    (when problem
      (return-from debugger-frame problem))
    (with-file-cache ()
      (let* ((loc (frame-location index))
             (locals (ignore-errors (swank/backend:frame-locals (frame-env-index index))))
             (shown (subseq locals 0 (min max-locals (length locals)))))
        (append
         (frame-plist index frame :call call)
         (when loc
           (list :path (namestring (getf loc :path))
                 :line (getf loc :line)
                 :column (getf loc :column)
                 :form (and (getf loc :offset)
                            (form-text-at (getf loc :path) (getf loc :offset)))))
         (let ((note (frame-locals-note frame locals)))
           (when note (list :locals-note note)))
         (list :locals (loop for l in shown
                             collect (list :name (local-name (getf l :name))
                                           :value (print-capped (getf l :value) max-value
                                                                :escape t)))
               :more-locals (- (length locals) (length shown))
               :catch-tags (mapcar (lambda (tag) (print-capped tag 200 :escape t))
                                   (ignore-errors (swank/backend:frame-catch-tags index))))))))))

(defun read-forms (code package)
  "The forms of CODE read in PACKAGE (a name or NIL for the current one)."
  (let ((*package* (or (and (packagep package) package)
                       (and package (find-package* package))
                       (and *current-evaluation* (evaluation-package *current-evaluation*))
                       *package*))
        (eof (list :eof))
        (forms '()))
    (with-input-from-string (in code)
      (loop for form = (read in nil eof)
            until (eq form eof)
            do (push form forms)))
    (nreverse forms)))

(defun read-code (code package)
  "The forms of CODE (READ-FORMS), or (values NIL MESSAGE) when it does not
read: said plainly, never a nested debugger level."
  (handler-case (values (read-forms code package) nil)
    (error (e)
      (values nil (format nil "The code does not read: ~A" (reader-problem-message e))))))

(defmacro with-code-forms ((forms code package) &body body)
  "BODY with FORMS bound to the forms of CODE read in PACKAGE (READ-CODE);
(:error MESSAGE) instead of BODY's value when CODE does not read."
  (let ((problem (gensym "PROBLEM")))
    `(multiple-value-bind (,forms ,problem) (read-code ,code ,package)
       (if ,problem
           (list :error ,problem)
           (progn ,@body)))))

(defun frame-code-package (index)
  "The package code for frame INDEX is read in: that of the frame's
function, as in SLDB, unless the frame is the implementation's, Swank's or
the server's (a top-level BREAK's), or INDEX is NIL: then NIL, the
evaluation's package."
  (let ((package (and index (ignore-errors (swank/backend:frame-package index)))))
    (and (packagep package)
         (not (implementation-internal-package-p package))
         (not (our-package-p package))
         (not (eq package (find-package "COMMON-LISP")))
         package)))

(defun exhausted-stack-problem (&key (forms nil forms-p))
  "Why code (FORMS, or any when not given) cannot run on this debugger's
thread now, or NIL. After a control stack exhaustion the debugger runs on
a stack still that deep, below its disarmed guard page: code recursing
there again runs past the end of the stack and kills the image (SBCL,
ECL). Constant FORMS (a restart's values) are safe to evaluate."
  (let ((down (stack-guard-disarmed-p)))
    ;; Down but the stack is shallow again (the code caught its exhaustion
    ;; and went on): arm it here, nothing to refuse.
    (when (and (eq down t) (< 0.5 (stack-room) 1.0))
      (restore-stack-guard)
      (setf down nil))
    (when (and (if (eq down :unknown)
                   (let ((c swank::*swank-debugger-condition*))
                     (and c (stack-exhaustion-p c)))
                   down)
               (or (not forms-p) (notevery #'constantp forms)))
      (list :error "This debugger's thread ran out of stack and is still that deep: the stack's guard page is not re-armed until the debugger returns, and code run here that recursed again would kill the image with all its state. Choose a restart first (debugger-restart with action abort); debugger-frame without `code` still shows a frame's locals."))))

(defun eval-forms-in-frame (forms index)
  "The values of the last of FORMS, each evaluated in frame INDEX's
lexical environment (INDEX NIL: in the null lexical environment, for a
debugger that lists no frame of the user's), in a compilation unit of
their own (else SBCL defers \"undefined variable\" warnings to the end of
the evaluation's unit)."
  (let ((values '()))
    (with-compilation-unit (:override t)
      (dolist (form forms)
        (setf values (multiple-value-list
                      (if index
                          (swank/backend:eval-in-frame (frame-form form index)
                                                       (frame-env-index index))
                          (eval form))))))
    values))

(defvar *frame-evaluations* '()
  "(THREAD . CATCH-TAG) of each code evaluation in a frame now running, so
STOP-FRAME-EVALUATION can end it from another thread.")

(defvar *frame-evaluations-lock*
  (swank/backend:make-lock :name "cl-mcp frame evaluations"))

(defun stop-frame-evaluation (thread-id)
  "End the code evaluation in a frame running on thread THREAD-ID (its
timeout passed, or its call was cancelled): it unwinds to
DEBUGGER-EVAL-IN-FRAME, which answers that it was stopped; the debugger
stays at its level. Call it from another thread. Returns (:stopped T-or-NIL)."
  (let* ((thread (swank/backend:find-thread thread-id))
         (entry (and thread
                     (swank/backend:call-with-lock-held
                      *frame-evaluations-lock*
                      (lambda () (assoc thread *frame-evaluations*))))))
    (when entry
      (let ((tag (cdr entry)))
        (ignore-errors
         (deliver-interrupt thread (lambda () (throw tag :stopped))))))
    (list :stopped (and entry t))))

(defun call-as-frame-evaluation (thunk)
  "THUNK's values, or :STOPPED when STOP-FRAME-EVALUATION ended it."
  (let ((tag (list 'frame-evaluation))
        (thread (swank/backend:current-thread)))
    (swank/backend:call-with-lock-held
     *frame-evaluations-lock*
     (lambda () (push (cons thread tag) *frame-evaluations*)))
    (unwind-protect
         (catch tag (funcall thunk))
      (swank/backend:call-with-lock-held
       *frame-evaluations-lock*
       (lambda ()
         (setf *frame-evaluations*
               (remove tag *frame-evaluations* :key #'cdr)))))))

(defun debugger-eval-in-frame (index code &key package (max-output 50000))
  "Evaluate the forms of CODE one by one in the lexical environment of
frame INDEX (NIL: of none, in the debugger's dynamic context), read in
PACKAGE (default: FRAME-CODE-PACKAGE). Returns
(:values (S ...) :stdout S :warnings (S ...)), or (:error MESSAGE) when
there is no such frame or CODE does not read, or (:stopped T :stdout S)
when STOP-FRAME-EVALUATION ended it. The warnings are CODE's own
(collected here, never the suspended evaluation's). An error in CODE enters
a nested debugger level (like SLDB's eval-in-frame; CALL-ENTERING-DEBUGGER)."
  (let ((problem (frame-code-problem index)))
    (when problem
      (return-from debugger-eval-in-frame problem)))
  (with-code-forms (forms code (or package (frame-code-package index)))
    (let ((out (make-capture-stream max-output))
          (values '())
          (warnings '()))
      (let ((*standard-output* out)
            (*error-output* out)
            (*trace-output* out))
        (handler-bind ((warning
                         (lambda (w)
                           (unless (or (ignorable-warning-p w)
                                       (>= (length warnings) *max-warnings*))
                             (push (format-warning w 2000) warnings))
                           (let ((r (find-restart 'muffle-warning w)))
                             (when r (invoke-restart r))))))
          (when (eq (call-as-frame-evaluation
                     (lambda ()
                       (call-entering-debugger
                        (lambda () (setf values (eval-forms-in-frame forms index))))
                       :done))
                    :stopped)
            (return-from debugger-eval-in-frame
              (list :stopped t :stdout (capture-contents out))))))
      (list :values (print-values values :max-output max-output)
            :stdout (capture-contents out)
            :warnings (nreverse warnings)))))

(defun find-debugger-restart (restart)
  "RESTART is Swank's index or a restart name (a string, matched without
package): the (INDEX RESTART) of the current level, or NIL."
  (let ((restarts (debugger-restarts)))
    (if (integerp restart)
        (assoc restart restarts)
        (find-if (lambda (entry)
                   (let ((n (restart-name (second entry))))
                     (and n (string-equal (symbol-name n) restart))))
                 restarts))))

(defun restart-values-problem (restart count)
  "Why COUNT values cannot go to RESTART (its lambda list says otherwise),
or NIL. Invoking it anyway would fail inside the debugger and open a
level that says only \"invalid number of arguments\"."
  (let ((lambda-list (restart-lambda-list restart)))
    (when (listp lambda-list)
      (let* ((keyword (position-if (lambda (x) (member x lambda-list-keywords)) lambda-list))
             (required (or keyword (length lambda-list)))
             (optional (and keyword (eq (nth keyword lambda-list) '&optional)
                            (length (loop for x in (nthcdr (1+ keyword) lambda-list)
                                          until (member x lambda-list-keywords)
                                          collect x))))
             (unbounded (and keyword
                             (intersection '(&rest &key &body)
                                           (nthcdr keyword lambda-list))))
             (most (and (not unbounded) (+ required (or optional 0)))))
        (when (or (< count required) (and most (> count most)))
          (format nil "Restart ~A takes ~A, not ~D: ~A"
                  (or (restart-name restart) "(anonymous)")
                  (cond ((eql most 0) "no values")
                        ((eql required most) (format nil "~D value~:P" required))
                        (most (format nil "~D to ~D values" required most))
                        (t (format nil "at least ~D value~:P" required)))
                  count
                  (if (eql most 0)
                      "invoke it without `values`."
                      (format nil "give ~:[them~;it~] in `values` (forms, evaluated), e.g. \"values\": [\"42\"]."
                              (eql most 1)))))))))

(defun debugger-invoke-restart (restart &key values package)
  "Invoke RESTART (see FIND-DEBUGGER-RESTART) with the values of the forms
VALUES (strings, read in PACKAGE and evaluated). Does not return when the
restart transfers control; returns (:error MESSAGE) when there is no such
restart."
  (let ((entry (find-debugger-restart restart)))
    (unless entry
      (return-from debugger-invoke-restart
        (list :error (format nil "No restart ~A at this level; the restarts are:~{ ~A~}."
                             restart
                             (mapcar (lambda (e)
                                       (format nil "~D ~A" (first e)
                                               (or (restart-name (second e)) "")))
                                     (debugger-restarts))))))
    (let ((forms (loop for v in values
                       append (multiple-value-bind (forms problem) (read-code v package)
                                (when problem
                                  (return-from debugger-invoke-restart (list :error problem)))
                                forms))))
      (let ((problem (restart-values-problem (second entry) (length forms))))
        (when problem
          (return-from debugger-invoke-restart (list :error problem))))
      (let ((problem (exhausted-stack-problem :forms forms)))
        (when problem
          (return-from debugger-invoke-restart problem)))
      (apply #'invoke-restart (second entry)
             (call-entering-debugger (lambda () (mapcar #'eval forms)))))))

(defvar *give-back-restart* nil
  "In a thread taken over (TAKE-OVER-THREAD): the restart that leaves the
taken-over level for the debugger the thread was in before.")

(defun debugger-abort ()
  "Abandon the whole evaluation (its own ABORT restart), from any level; in
a thread taken over, hand it back to the debugger it was in."
  (let ((r (or (and *current-evaluation* (evaluation-abort-restart *current-evaluation*))
               *give-back-restart*)))
    (if r
        (invoke-restart r)
        (list :error "This debugger does not belong to an evaluation of this server."))))

;;; Threads in the debugger that are not ours (attach mode: the user's
;;; application threads, in the user's SLIME debugger).

(defun take-over-thread (thread-id claim)
  "Make thread THREAD-ID, which sits in a debugger (the user's SLIME one,
say), enter a nested level of its debugger served by this connection:
an interrupt binds Swank's connection to ours and CLAIM (a request id the
server claimed) as the pending continuation, so the server's tools drive
that level. DEBUGGER-ABORT there hands the thread back to the level it was
in. Returns (:ok T) or (:error MESSAGE)."
  (let ((thread (swank/backend:find-thread thread-id))
        (connection (symbol-value (find-symbol "*EMACS-CONNECTION*" "SWANK"))))
    (multiple-value-bind (in-debugger condition)
        (and thread (thread-debugger-condition thread))
      (cond ((null thread)
             (list :error (format nil "No thread with id ~A (list-threads lists them)." thread-id)))
            ((eq thread (swank/backend:current-thread))
             (list :error "That is the thread serving this request."))
            ((not (and in-debugger condition))
             (list :error (format nil "Thread ~A is not in the debugger; list-threads' interrupt action puts it there." thread-id)))
            (t
             (deliver-interrupt
              thread
              (lambda ()
                (let ((*give-back-restart* (find-restart 'abort)))
                  (progv (list (find-symbol "*EMACS-CONNECTION*" "SWANK")
                               (find-symbol "*PENDING-CONTINUATIONS*" "SWANK"))
                      (list connection (list claim))
                    (enter-debugger condition)))))
             (list :ok t))))))

(defun frame-action-error (what index e)
  (list :error (format nil "Cannot ~A frame ~D on ~A: ~A" what index
                       (lisp-implementation-type) (print-capped e 500))))

(defun debugger-return-from-frame (index form &key package)
  "Make frame INDEX return the values of FORM (read in PACKAGE, evaluated
in the frame). Returns (:error MESSAGE) when the implementation cannot."
  (multiple-value-bind (frame problem) (listed-frame index)
    (let ((problem (or problem
                       (backend-operation-problem :return)
                       (frame-operation-error :return index frame))))
      (when problem
        (return-from debugger-return-from-frame problem))))
  (with-code-forms (forms form package)
    ;; Even a constant: SBCL's return compiles code in the frame.
    (let ((problem (exhausted-stack-problem)))
      (when problem
        (return-from debugger-return-from-frame problem)))
    (let ((result (handler-case
                      (swank/backend:return-from-frame
                       index (if (cdr forms) `(progn ,@forms) (first forms)))
                    (error (e)
                      (return-from debugger-return-from-frame
                        (frame-action-error "return from" index e))))))
      (list :error (format nil "Cannot return from frame ~D: ~A. ~A"
                           index (if (stringp result) result "not supported here")
                           (frame-action-advice :return))))))

(defun debugger-step (kind &optional (frame 0))
  "Single-step from this debugger: KIND :INTO (the next form, entering
calls), :NEXT (over calls) or :OUT (until the current function returns).
At a stepped form it steps on; elsewhere (a BREAK) it starts stepping and
continues. Does not return when it steps; (:error MESSAGE) when it cannot."
  (unless (stepper-available-p)
    (return-from debugger-step
      (list :error (format nil "Single-stepping (step, next, out) needs SBCL's stepper; ~A has none the server can drive. Look at frames with debugger-frame and pick a restart instead."
                           (lisp-implementation-type)))))
  (handler-case
      (ecase kind
        (:into (swank:sldb-step frame))
        (:next (swank:sldb-next frame))
        (:out (swank:sldb-out frame)))
    (error (e)
      (list :error (format nil "Cannot step here: ~A Stepping needs code compiled with (debug 3) (e.g. after (declaim (optimize (debug 3)))) and a CONTINUE restart or a stepped form (STEP)."
                           (print-capped e 500))))))

(defun debugger-restart-frame (index)
  "Restart frame INDEX (call its function again with the arguments of its
call; a redefined function runs its new definition). Returns (:error
MESSAGE) when it cannot: said with why."
  (multiple-value-bind (frame problem) (listed-frame index)
    (let ((problem (or problem
                       (backend-operation-problem :restart)
                       (frame-operation-error :restart index frame))))
      (when problem
        (return-from debugger-restart-frame problem)))
    ;; The frames the debugger lists after a stack exhaustion are near the
    ;; stack's end: a call from one runs past it (the guard is re-armed
    ;; on the way, just above where the call goes on).
    (when (and (exhausted-stack-problem) (< (frame-stack-room frame) 0.25))
      (return-from debugger-restart-frame
        (list :error (format nil "Cannot restart frame ~D while the stack is exhausted: the frame is near the end of the stack, whose guard page is not re-armed until the debugger returns, and a call from it would run past the end and kill the image with all its state. Choose a restart first (debugger-restart with action abort), then call the fixed function again."
                             index))))
    (let ((result (handler-case (let ((own (restart-frame-with-its-arguments frame)))
                                  (if (eq own :unsupported)
                                      (swank/backend:restart-frame index)
                                      own))
                    (error (e)
                      (return-from debugger-restart-frame
                        (frame-action-error "restart" index e))))))
      (list :error (format nil "Cannot restart frame ~D ~A: ~A. ~A"
                           index (frame-text frame)
                           (if (stringp result) (string-right-trim "." result) "not supported here")
                           (frame-action-advice :restart))))))

(defun yield-default-connection ()
  "Called on the server's connection to an attached image: put it last
among Swank's connections, so Swank's default connection (where a thread
outside any request, e.g. the user's application thread, sends its
debugger) stays the user's SLIME."
  (let ((ours swank::*emacs-connection*))
    (when (and ours (cdr swank::*connections*))
      (setf swank::*connections*
            (append (remove ours swank::*connections*) (list ours))))
    t))
