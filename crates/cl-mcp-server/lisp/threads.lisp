;;;; threads.lisp --- the image's threads: list, backtrace, interrupt,
;;;; kill, a foreign debugger read without touching it.

(in-package #:cl-mcp-server)

;;; Threads.

(defparameter *protected-thread-names*
  '(("control-thread" . "Swank's control thread, which every request and reply goes through")
    ("reader-thread" . "Swank's reader thread, which reads every request of the server")
    ("swank-indentation-cache-thread" . "Swank's indentation cache thread")
    ("Swank Sentinel" . "Swank's sentinel thread, which keeps its connections")
    ("cl-mcp-eval" . "the server's evaluation channel thread, which runs evaluate-lisp"))
  "The machinery the server reaches the image through, by thread name, with
what each one is: killing or interrupting one (a debugger there has no
taker) cuts the server off the image or ends it. A name starting \"Swank \"
is Swank's listener for a port.")

(defun machinery-thread-p (thread)
  "What THREAD is when it is part of the machinery of *PROTECTED-THREAD-NAMES*
(a phrase), else NIL."
  (let ((name (ignore-errors (swank/backend:thread-name thread))))
    (when (stringp name)
      (or (cdr (assoc name *protected-thread-names* :test #'string=))
          (and (> (length name) 6) (string= "Swank " name :end2 6)
               (digit-char-p (char name 6))
               "Swank's listener thread")))))

(defun protected-thread-refusal (thread target action)
  "Why ACTION (:kill or :interrupt) of TARGET (whose id is THREAD) is
refused, or NIL: the image's main thread, and Swank's and the server's own
threads, are refused the same way for both actions."
  (let ((verb (if (eq action :kill) "killing" "interrupting")))
    (cond ((and (eq target (image-main-thread))
                (or (eq action :kill) (local-image-p)))
           ;; In an image the server started, the main thread only waits
           ;; on the server's lifeline: a debugger there has no taker, is
           ;; aborted, and the abort ends the image. Attached, the user's
           ;; SLIME takes an interrupt's debugger.
           (if (eq action :kill)
               (format nil "Thread ~A is the image's main thread: killing it ends the image and all its state. To start afresh, use image-restart."
                       thread)
               (format nil "Thread ~A is the image's main thread, which only waits for the server: interrupting it would end the image and all its state. Interrupt an evaluation with image-interrupt instead."
                       thread)))
          ((machinery-thread-p target)
           (format nil "Thread ~A is ~A: ~A it would cut the server off the image (its tools would no longer be answered). Refused; interrupt an evaluation with image-interrupt, or start afresh with image-restart."
                   thread (machinery-thread-p target) verb)))))

(defun image-main-thread ()
  "The thread whose end ends the image: SBCL's main thread, else the one
that runs boot.lisp's MAIN in an image the server started (NIL attached to
a Lisp other than SBCL)."
  (or (implementation-main-thread)
      (let ((s (find-symbol "*MAIN-THREAD*" "CL-MCP-BOOT")))
        (and s (boundp s) (symbol-value s)))))

(defun local-image-p ()
  "Whether this image is one the server started (not the user's own)."
  (and (find-package "CL-MCP-BOOT") t))

(defun thread-plist (thread)
  (multiple-value-bind (in-debugger condition) (thread-debugger-condition thread)
    (let ((alive (swank/backend:thread-alive-p thread)))
      (list :id (swank/backend:thread-id thread)
            :name (princ-to-string* (or (ignore-errors (swank/backend:thread-name thread)) ""))
            :status (cond ((not alive) "dead")
                          ((thread-waiting-on thread)
                           (format nil "waiting on ~A" (thread-waiting-on thread)))
                          (t "alive"))
            :in-debugger (and in-debugger t)
            :condition (and condition (print-capped condition 500))
            :current (and (eq thread (swank/backend:current-thread)) t)))))

(defun thread-backtrace (thread limit)
  "The frames of THREAD (names and source locations), taken inside it
through an interrupt; NIL when it did not answer within 3 seconds. Only
names are printed there: an interrupt handler must not run user code
(PRINT-OBJECT methods of arguments). Frames above the debugger's entry
(when THREAD sits in a debugger) and interrupt machinery are left out."
  (let ((box (list :pending)))
    (deliver-interrupt
     thread
     (lambda ()
       (let ((frames '()))
         (ignore-errors
          (swank/backend:call-with-debugging-environment
           (lambda ()
             (let ((inner nil))
               (dolist (frame (swank/backend:compute-backtrace 0 (+ limit 200)))
                 (let ((traced (traced-call-frame frame inner)))
                   (setf inner (frame-function-name frame))
                   (unless (eq traced :hide)
                     (push (list (or traced inner)
                                 (ignore-errors (swank/backend:frame-source-location frame)))
                           frames))))))))
         (setf (car box) (nreverse frames)))))
    (loop repeat 300
          while (eq (car box) :pending)
          do (sleep 0.01))
    (let ((frames (car box)))
      (unless (eq frames :pending)
        (let* ((entry (position-if (lambda (f)
                                     (member (frame-name-symbol (first f))
                                             '(invoke-debugger)))
                                   frames :from-end t))
               (frames (if entry (nthcdr (1+ entry) frames) frames))
               (frames (member-if-not (lambda (f)
                                        (let ((s (frame-name-symbol (first f))))
                                          (or (null (first f))
                                              (stringp (first f))
                                              (and s (our-package-p (symbol-package s)))
                                              (interrupt-machinery-p s)
                                              (member s '(error cerror signal break))
                                              (and s (member (symbol-name s)
                                                             '("INVOKE-INTERRUPTION" "CALL-WITH-DEBUGGING-ENVIRONMENT"
                                                               "%SIGNAL" "RUN-INTERRUPTION")
                                                             :test #'string=)))))
                                      frames)))
          (with-file-cache ()
            (loop for (name location) in frames
                  for i from 0 below limit
                  collect (append (list :index i
                                        :frame (short-print name 400))
                                  (let ((plist (and location
                                                    (ignore-errors (location-plist location)))))
                                    (and plist (getf plist :path)
                                         (list :path (getf plist :path)
                                               :line (getf plist :line))))))))))))

(defun in-thread-value (symbol-name thread)
  "The value of Swank's special SYMBOL-NAME in THREAD, or NIL."
  (let ((s (find-symbol symbol-name "SWANK")))
    (and s (symbol-value-in-thread s thread))))

(defun thread-debugger-view (thread-id &key (count 20))
  "Thread THREAD-ID sitting in a debugger, seen without touching it:
(:level N :type S :message S :restarts (...) :frames (...) :total-frames N)
like DEBUGGER-STATE (frames from an interrupt that prints only names), or
(:error MESSAGE)."
  (let ((thread (swank/backend:find-thread thread-id)))
    (multiple-value-bind (in-debugger condition)
        (and thread (thread-debugger-condition thread))
      (cond ((null thread)
             (list :error (format nil "No thread with id ~A (list-threads lists them)." thread-id)))
            ((not in-debugger)
             (list :error (format nil "Thread ~A is not in the debugger." thread-id)))
            (t
             (let ((frames (or (thread-backtrace thread (max 1 (min 200 count))) '())))
               (list :level (or (in-thread-value "*SLDB-LEVEL*" thread) 1)
                     :type (if condition (type-name condition) "")
                     :message (if condition (print-capped condition 20000) "")
                     :restarts (loop for r in (in-thread-value "*SLDB-RESTARTS*" thread)
                                     for i from 0
                                     collect (list :index i
                                                   :name (let ((n (restart-name r)))
                                                           (if n (type-name-of-symbol n) ""))
                                                   :description (print-capped r 1000)))
                     :frames (loop for f in frames
                                   collect (list* :index (getf f :index)
                                                  :frame (getf f :frame)
                                                  (and (getf f :path)
                                                       (list :path (let ((p (getf f :path)))
                                                                     (if (pathnamep p) (namestring p) p))
                                                             :line (getf f :line)))))
                     :total-frames (length frames))))))))

(defun thread-request (&key (action :list) thread (limit 30))
  "ACTION :list (every thread), :backtrace, :interrupt or :kill THREAD (an
id from the list). Returns (:threads ((:id :name :status :in-debugger
:condition :current)...)) plus, for :backtrace, (:thread ID :frames
((:index :frame :path :line)...)), for :interrupt and :kill (:thread ID
:done T :message S); (:error MESSAGE) for an unknown or refused thread."
  (let* ((action (intern (string-upcase (string action)) "KEYWORD"))
         (target (and thread (swank/backend:find-thread thread)))
         (limit (max 1 (min 200 (or limit 30)))))
    (when (and (not (eq action :list)) (null target))
      (return-from thread-request
        (list :error (if thread
                         (format nil "No thread with id ~A (list the threads for their ids)." thread)
                         (format nil "`thread` (an id from the list) is needed for ~(~A~)." action)))))
    (when (and target (member action '(:interrupt :kill :backtrace))
               (eq target (swank/backend:current-thread)))
      (return-from thread-request
        (list :error "That is the thread serving this request.")))
    (when (and target (member action '(:interrupt :kill :backtrace))
               (not (swank/backend:thread-alive-p target)))
      (return-from thread-request
        (list :error (format nil "Thread ~A has already finished." thread))))
    (let ((extra
            (case action
              (:list nil)
              (:backtrace
               (let ((frames (thread-backtrace target limit)))
                 (if (listp frames)
                     (list :thread thread :frames frames)
                     (return-from thread-request
                       (list :error "The thread did not answer within 3 seconds (it blocks interrupts, e.g. inside foreign code).")))))
              (:kill
               (let ((refusal (protected-thread-refusal thread target :kill)))
                 (when refusal
                   (return-from thread-request (list :error refusal))))
               (swank/backend:kill-thread target)
               (loop repeat 100 while (swank/backend:thread-alive-p target) do (sleep 0.01))
               (list :thread thread :done t
                     :message (if (swank/backend:thread-alive-p target)
                                  "Asked the thread to terminate; it is still unwinding."
                                  "The thread was terminated.")))
              (:interrupt
               (let ((refusal (protected-thread-refusal thread target :interrupt)))
                 (when refusal
                   (return-from thread-request (list :error refusal))))
               (deliver-interrupt
                target
                (lambda ()
                  (with-simple-restart (continue "Resume the interrupted thread.")
                    (invoke-debugger
                     (make-condition 'simple-condition
                                     :format-control "Interrupted by cl-mcp-server (list-threads)."
                                     :format-arguments nil)))))
               ;; Who takes the debugger over depends on the image: the
               ;; user's SLIME in attach mode; without a taker the server
               ;; aborts it, which ends a thread of the user's own.
               ;; What became of it after half a second (a debugger nobody
               ;; holds is aborted within a round trip).
               (let ((state :running))
                 (loop repeat 25
                       do (sleep 0.02)
                          (setf state (cond ((not (swank/backend:thread-alive-p target)) :dead)
                                            ((thread-debugger-condition target) :debugger)
                                            (t :running)))
                          (when (eq state :dead) (return)))
                 (list :thread thread :done t
                       :message (case state
                                  (:debugger "The thread was interrupted: it sits in the debugger where it was (its CONTINUE restart resumes it).")
                                  (:dead "The thread was interrupted and entered the debugger, but nothing in this image holds a debugger for it: it was aborted, which ended the thread.")
                                  (t "The thread was interrupted and entered the debugger, which was left at once (aborted to the thread's top level, or continued).")))))
              (t (return-from thread-request
                   (list :error (format nil "Unknown action ~(~A~): use list, backtrace, interrupt or kill." action)))))))
      (append (list :threads (mapcar #'thread-plist (swank/backend:all-threads)))
              extra))))
