;;;; trace.lisp --- a tracer that records calls as data, per session;
;;;; a session's end (what only it traced is untraced).

(in-package #:cl-mcp-server)

;;; Trace records.
;;;
;;; Traced functions report each call and return to `trace-report', which
;;; keeps them as records (not text on *trace-output*) in the stores of the
;;; sessions that traced the function: bounded stores the tool reads and
;;; clears. A function stays traced while some session asked for it; a
;;; session's end (`end-session') untraces what only it traced, so its
;;; traces never outlive it in a shared or attached image.

(defparameter *max-trace-records* 5000
  "Records kept per session; later calls are counted as dropped.")

(defstruct (trace-record (:constructor make-trace-record
                             (id depth name thread arguments evaluation)))
  ;; EVALUATION: the server's evaluation the call was made in, or NIL.
  ;; START: its entry's time (MONOTONIC-MICROSECONDS); ELAPSED-US: microseconds from
  ;; entry to exit, once it returned or exited.
  id depth name thread arguments evaluation (outcome :running) values
  (start (monotonic-microseconds)) elapsed-us)

(defstruct trace-store
  (records (make-array 64 :adjustable t :fill-pointer 0))
  (dropped 0)
  ;; Thread -> records of its calls not yet returned, innermost first.
  (open (make-hash-table :test 'eq)))

(defvar *trace-next-id* 0)
(defvar *trace-lock* (swank/backend:make-lock :name "cl-mcp trace"))
(defvar *trace-owners* (make-hash-table :test 'equal)
  "Traced function name -> the sessions that traced it, newest first.")
(defvar *trace-stores* (make-hash-table :test 'equal)
  "Session -> its TRACE-STORE.")

(defun with-trace-lock (function)
  (swank/backend:call-with-lock-held *trace-lock* function))

(defun trace-store (session)
  "SESSION's store (created on first use). Call with *TRACE-LOCK* held."
  (or (gethash session *trace-stores*)
      (setf (gethash session *trace-stores*) (make-trace-store))))

(defun session-traced-specs (session)
  "The function names SESSION traced, oldest first."
  (with-trace-lock
    (lambda ()
      (let ((specs '()))
        (maphash (lambda (spec owners)
                   (when (member session owners :test #'equal)
                     (push spec specs)))
                 *trace-owners*)
        (sort specs #'string< :key #'short-print)))))

(defun own-trace (spec session)
  (with-trace-lock
    (lambda ()
      (pushnew session (gethash spec *trace-owners*) :test #'equal))))

(defun disown-trace (spec session)
  "Drop SESSION from SPEC's owners; untrace SPEC when nobody is left.
Returns true when SPEC is no longer traced."
  (let ((last (with-trace-lock
                (lambda ()
                  (let ((owners (remove session (gethash spec *trace-owners*)
                                        :test #'equal)))
                    (if owners
                        (progn (setf (gethash spec *trace-owners*) owners) nil)
                        (progn (remhash spec *trace-owners*) t)))))))
    (when last
      (ignore-errors (remove-trace spec)))
    last))

(defun printed-list (objects)
  "OBJECTS printed (at most 20, each capped)."
  (let ((n (length objects)))
    (append (loop for o in objects
                  repeat 20
                  collect (short-print o 300))
            (when (> n 20) (list (format nil "[~D more]" (- n 20)))))))

(defun trace-report (depth name event values)
  "The tracer's reporter (see INSTALL-TRACE): records a call on :ENTER in
the stores of the sessions that traced NAME, completes it on :EXIT or
:NON-LOCAL-EXIT."
  (let ((thread (swank/backend:current-thread)))
    (with-trace-lock
     (lambda ()
       (dolist (session (gethash name *trace-owners*))
         (let* ((store (trace-store session))
                (open (trace-store-open store))
                ;; Arguments and values alike, as the session's results
                ;; print (SBCL's tracer binds *PACKAGE* to another package
                ;; around a call's entry than around its exit).
                (printed (and (not (eq event :non-local-exit))
                              (let ((*package* (session-package session)))
                                (printed-list values)))))
           (case event
             (:enter
              (let ((record (make-trace-record (incf *trace-next-id*) depth
                                               (short-print name 300)
                                               (princ-to-string*
                                                (or (ignore-errors (swank/backend:thread-name thread))
                                                    "thread"))
                                               printed
                                               *current-evaluation*))
                    (records (trace-store-records store)))
                (push record (gethash thread open))
                (if (< (fill-pointer records) *max-trace-records*)
                    (vector-push-extend record records)
                    (incf (trace-store-dropped store)))))
             (t
              (let ((record (pop (gethash thread open))))
                (unless (gethash thread open)
                  (remhash thread open))
                (when record
                  (setf (trace-record-outcome record)
                        (if (eq event :exit) :returned :non-local-exit)
                        (trace-record-values record) printed
                        (trace-record-elapsed-us record)
                        (- (monotonic-microseconds) (trace-record-start record)))))))))))))

(defun trace-record-plist (r)
  (list :id (trace-record-id r) :depth (trace-record-depth r)
        :name (trace-record-name r) :thread (trace-record-thread r)
        :arguments (trace-record-arguments r)
        :outcome (string-downcase (symbol-name (trace-record-outcome r)))
        :values (trace-record-values r)
        :elapsed-us (trace-record-elapsed-us r)))

(defun settle-trace-records (store)
  "Calls still open in STORE whose evaluation is over were left by a
non-local exit (an abort, a THROW past them) that the tracer never
reported: mark them so, and forget them. Call with *TRACE-LOCK* held."
  (let ((open (trace-store-open store))
        (threads '()))
    (maphash (lambda (thread records)
               (declare (ignore records))
               (push thread threads))
             open)
    (dolist (thread threads)
      (let ((left (remove-if (lambda (r)
                               (let ((e (trace-record-evaluation r)))
                                 (when (and e (evaluation-ended e))
                                   (setf (trace-record-outcome r) :non-local-exit)
                                   t)))
                             (gethash thread open))))
        (if left
            (setf (gethash thread open) left)
            (remhash thread open))))))

(defun take-trace-records (session limit clear)
  "The oldest LIMIT records of SESSION (and how many more there are); with
CLEAR, the finished ones returned are removed from its store."
  (with-trace-lock
   (lambda ()
     (settle-trace-records (trace-store session))
     (let* ((store (trace-store session))
            (all (trace-store-records store))
            (n (fill-pointer all))
            (shown (min n limit))
            (records (loop for i below shown
                           collect (trace-record-plist (aref all i))))
            (dropped (trace-store-dropped store)))
       (when clear
         ;; Calls still running stay, so their return is not lost.
         (let ((keep (remove-if-not (lambda (r) (eq (trace-record-outcome r) :running))
                                    (subseq all 0 shown)))
               (rest (subseq all shown)))
           (setf (fill-pointer all) 0)
           (map nil (lambda (r) (vector-push-extend r all))
                (concatenate 'list keep rest))
           (setf (trace-store-dropped store) 0)))
       (list :records records :more (- n shown) :dropped dropped)))))

(defun end-session (session)
  "SESSION (a session key) is over: untrace what only it traced, drop its
trace records and inspections, forget its current package. Returns
(:untraced (S...))."
  (let ((untraced '()))
    (dolist (spec (session-traced-specs session))
      (when (disown-trace spec session)
        (push (short-print spec) untraced)))
    (with-trace-lock (lambda () (remhash session *trace-stores*)))
    (swank/backend:call-with-lock-held
     *inspections-lock* (lambda () (remhash session *inspections*)))
    (swank/backend:call-with-lock-held
     *session-lock* (lambda () (remhash session *session-packages*)))
    (list :untraced (nreverse untraced))))

(defun read-trace-spec (string package)
  "A function name from the user's text: FOO, PKG::FOO, (SETF FOO),
(METHOD FOO :AROUND (INTEGER)). Returns (values spec error-message)."
  (handler-case
      (let* ((*package* package)
             (*read-eval* nil)
             (spec (read-from-string string)))
        (cond ((not (trace-spec-supported-p spec))
               (values nil (format nil "~A is not a function name this image can trace (a symbol, (setf name)~A)."
                                   string (trace-spec-syntax-hint))))
              ((not (trace-spec-defined-p spec))
               (values nil (format nil "~A names no function~A in the image."
                                   (short-print spec)
                                   (if (and (consp spec) (eq (first spec) 'method))
                                       " (no such generic function or method)" ""))))
              ((and (consp spec) (eq (first spec) 'method)
                    (slot-accessor-method-p (trace-spec-method spec)))
               (values nil (format nil "~A is a slot accessor method: the generic function reads or writes the slot without calling it, so tracing it would record nothing. Trace the generic function ~A instead."
                                   (short-print spec) (short-print (second spec)))))
              (t (values spec nil))))
    (error (e)
      (values nil (format nil "Cannot read ~S as a function name: ~A" string (reason-only e))))))

(defun reason-only (e)
  "E's report, capped; a reader error's without the position and stream
SBCL appends (they name only our string stream holding the user's name)."
  (let* ((text (print-capped e 300))
         (hits (and (typep e 'reader-error)
                    (loop for marker in (list (format nil "~%~%") "  Line: " " Stream: ")
                          for at = (search marker text)
                          when at collect at)))
         (cut (and hits (reduce #'min hits))))
    (string-right-trim '(#\Space #\Newline) (if cut (subseq text 0 cut) text))))

(defun trace-request (&key trace untrace untrace-all session package (limit 200)
                        (clear t))
  "Trace the functions named in TRACE and untrace those in UNTRACE (lists of
strings) or all of ours with UNTRACE-ALL; then return the records of the
calls so far. Returns (:traced (S...) :changes ((:name :action :ok
:message)...) :records ((:id :depth :name :thread :arguments :outcome
:values)...) :more N :dropped N)."
  (multiple-value-bind (start-package package-error) (resolve-package package)
    (when package-error
      (return-from trace-request (list :error package-error)))
    (let ((package (or start-package (session-package session)))
          (changes '()))
      (flet ((change (name action ok message)
               (push (list :name name :action action :ok ok :message message) changes)))
        (dolist (text untrace)
          (multiple-value-bind (spec error) (read-trace-spec text package)
            (cond (error (change text "untrace" nil error))
                  ((not (member spec (session-traced-specs session) :test #'equal))
                   (change (short-print spec) "untrace" nil "It was not traced by this session."))
                  (t (disown-trace spec session)
                     (change (short-print spec) "untrace" t nil)))))
        (when untrace-all
          (dolist (spec (session-traced-specs session))
            (disown-trace spec session)
            (change (short-print spec) "untrace" t nil)))
        (dolist (text trace)
          (multiple-value-bind (spec error) (read-trace-spec text package)
            (if error
                (change text "trace" nil error)
                (let ((warnings '()))
                  (handler-bind ((warning (lambda (w)
                                            (push (print-capped w 500) warnings)
                                            (muffle-warning w))))
                    (handler-case
                        (progn
                          (own-trace spec session)
                          (handler-bind ((error (lambda (e)
                                                  (declare (ignore e))
                                                  (disown-trace spec session))))
                            (install-trace spec (trace-reporter)))
                          (let ((notes (append (reverse warnings)
                                               (let ((c (trace-caveat spec))) (and c (list c))))))
                            (change (short-print spec) "trace" t
                                    (and notes (format nil "~{~A~^ ~}" notes)))))
                      (error (e)
                        (change (short-print spec) "trace" nil (print-capped e 500))))))))))
      (append (list :traced (mapcar #'short-print (session-traced-specs session))
                    :changes (nreverse changes))
              ;; At most 500 records: a reply stays far below Swank's
              ;; message limit (each holds 40 strings of 300 characters).
              (take-trace-records session (max 0 (min 500 (or limit 200))) clear)))))
