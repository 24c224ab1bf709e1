;;;; inspect.lisp --- looking into the live image: an inspector, a tracer
;;;; that records calls as data, the statistical profiler, threads.
;;;;
;;;; Portable code; what needs SBCL (trace reporting, thread states, the
;;;; profiler) is in impl-sbcl.lisp.

(in-package #:cl-mcp-server)

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

;;; The inspector.
;;;
;;; Each session has a stack of inspected objects; `inspect-request' shows
;;; the top one as numbered parts (CLOS slots, hash-table entries, vector
;;; elements, ...). A part's number pushes that part; :back pops.

(defvar *inspections* (make-hash-table :test 'equal)
  "Session -> list of (LABEL . OBJECT), the inspected object first.")

(defvar *inspections-lock* (swank/backend:make-lock :name "cl-mcp inspections"))

(defun inspection-stack (session)
  (swank/backend:call-with-lock-held
   *inspections-lock* (lambda () (gethash session *inspections*))))

(defun (setf inspection-stack) (stack session)
  (swank/backend:call-with-lock-held
   *inspections-lock* (lambda () (setf (gethash session *inspections*) stack))))

(defvar *unbound-slot* (make-symbol "UNBOUND-SLOT")
  "Stands for the value of an unbound slot among an object's parts.")

(defun short-print (object &optional (limit 300))
  (if (eq object *unbound-slot*)
      "#<unbound>"
      (print-capped object limit :escape t :length 20 :level 3)))

(defun has-parts-p (object)
  (when (eq object *unbound-slot*)
    (return-from has-parts-p nil))
  (typecase object
    ((or null (eql t) number character keyword) nil)
    (string (plusp (length object)))
    ((or cons array hash-table standard-object structure-object condition
         function symbol package)
     t)
    (t nil)))

(defun proper-list-length (list)
  "The length of LIST when it is a proper list, else NIL."
  (let ((n (ignore-errors (list-length list))))
    (and n (null (cdr (last list))) n)))

(defun object-slots (object)
  "(NAME . VALUE) for every slot of a CLOS or structure object; an unbound
slot's value is *UNBOUND-SLOT*."
  (let ((class (class-of object)))
    (ignore-errors (swank-mop:finalize-inheritance class))
    (loop for slot in (ignore-errors (swank-mop:class-slots class))
          for name = (swank-mop:slot-definition-name slot)
          collect (cons name
                        (if (ignore-errors (slot-boundp object name))
                            (ignore-errors (slot-value object name))
                            *unbound-slot*)))))

(defun function-facts (function)
  "Attributes of a function: name, lambda list, source location."
  (let* ((name (ignore-errors (swank/backend:function-name function)))
         (arglist (ignore-errors (swank/backend:arglist function)))
         (location (ignore-errors (swank/backend:find-source-location function))))
    (list :name name
          :arglist (if (eq arglist :not-available) nil arglist)
          :location (and location
                         (let ((plist (location-plist location :octets t)))
                           (and (getf plist :path) plist))))))

(defun inspect-view (object start count)
  "What the inspector shows of OBJECT: (values KIND ATTRIBUTES PARTS TOTAL
LOCATION), ATTRIBUTES a list of (NAME . STRING), PARTS the page
[START, START+COUNT) as (LABEL . OBJECT), TOTAL the number of parts."
  (let ((attributes '()) (all nil) (total nil) (page nil) (location nil) kind)
    (flet ((attr (name value) (push (cons name value) attributes))
           (page-of (list) (subseq list (min start (length list))
                                   (min (+ start count) (length list)))))
      (typecase object
        (hash-table
         (setf kind "hash-table")
         (attr "test" (short-print (hash-table-test object)))
         (attr "count" (princ-to-string (hash-table-count object)))
         (let ((entries '()))
           ;; A key with parts of its own (a list, an instance) is a
           ;; part too, before its entry, so it can be looked into.
           (maphash (lambda (k v)
                      (when (and (has-parts-p k)
                                 (not (typep k '(or string symbol package function))))
                        (push (cons (format nil "key ~A" (short-print k 200)) k) entries))
                      (push (cons (short-print k 200) v) entries))
                    object)
           (setf all (nreverse entries))))
        (package
         (setf kind "package")
         (attr "name" (package-name object))
         (attr "nicknames" (short-print (package-nicknames object)))
         (let ((n 0)) (do-external-symbols (s object) (declare (ignore s)) (incf n))
           (attr "external-symbols" (princ-to-string n)))
         (setf all (list (cons "use-list" (package-use-list object))
                         (cons "used-by" (package-used-by-list object)))))
        ((or standard-object structure-object condition)
         (setf kind (typecase object
                      (structure-object "structure")
                      (condition "condition")
                      (generic-function "generic-function")
                      (t "instance")))
         (attr "class" (short-print (class-name (class-of object))))
         (when (typep object 'generic-function)
           (let ((facts (function-facts object)))
             (attr "lambda-list" (short-print (getf facts :arglist)))
             (setf location (getf facts :location)))
           (setf all (loop for m in (swank-mop:generic-function-methods object)
                           collect (cons (short-print
                                          (append (swank-mop:method-qualifiers m)
                                                  (list (mapcar (lambda (c)
                                                                  (if (typep c 'class)
                                                                      (class-name c)
                                                                      c))
                                                                (swank-mop:method-specializers m)))))
                                         m))))
         (unless (typep object 'generic-function)
           (setf all (loop for (name . value) in (object-slots object)
                           collect (cons (short-print name) value)))))
        (function
         (setf kind "function")
         (let ((facts (function-facts object)))
           (attr "name" (short-print (getf facts :name)))
           (attr "lambda-list" (short-print (getf facts :arglist)))
           (setf location (getf facts :location)))
         (setf all (loop for value in (closure-values object)
                         for i from 0
                         collect (cons (format nil "closed-over ~D" i) value))))
        (cons
         (let ((n (proper-list-length object)))
           (cond (n (setf kind "list")
                    (attr "length" (princ-to-string n))
                    (setf total n
                          page (loop for x in (nthcdr (min start n) object)
                                     for i from start below (min n (+ start count))
                                     collect (cons (princ-to-string i) x))))
                 (t (setf kind "cons")
                    (setf all (list (cons "car" (car object))
                                    (cons "cdr" (cdr object))))))))
        (array
         (setf kind (cond ((stringp object) "string")
                          ((vectorp object) "vector")
                          (t "array")))
         (attr "element-type" (short-print (array-element-type object)))
         (attr "dimensions" (short-print (array-dimensions object)))
         (let ((n (array-total-size object)))
           (when (and (vectorp object) (array-has-fill-pointer-p object))
             (attr "fill-pointer" (princ-to-string (fill-pointer object)))
             (setf n (fill-pointer object)))
           (setf total n
                 page (loop for i from start below (min n (+ start count))
                            collect (cons (if (vectorp object)
                                              (princ-to-string i)
                                              (short-print
                                               (let ((subs '()) (r i))
                                                 (dolist (d (reverse (array-dimensions object)) subs)
                                                   (multiple-value-bind (q m) (floor r d)
                                                     (push m subs)
                                                     (setf r q))))))
                                          (row-major-aref object i))))))
        (symbol
         (setf kind "symbol")
         (attr "name" (symbol-name object))
         (attr "package" (let ((p (symbol-package object)))
                           (if p (package-name p) "#<none>")))
         (setf all (append (when (boundp object)
                             (list (cons "value" (symbol-value object))))
                           (when (fboundp object)
                             (list (cons "function"
                                         (or (macro-function object)
                                             (fdefinition object)))))
                           (when (find-class object nil)
                             (list (cons "class" (find-class object))))
                           (when (symbol-plist object)
                             (list (cons "plist" (symbol-plist object)))))))
        (t
         (setf kind (string-downcase (princ-to-string* (class-name (class-of object)))))
         (attr "description"
               (truncate-string (string-trim '(#\Newline #\Space)
                                             (with-output-to-string (s)
                                               (ignore-errors (describe object s))))
                                2000))))
      (values kind (nreverse attributes)
              (or page (page-of all))
              (or total (length all))
              location))))

(defun inspection-reply (session start count)
  (let* ((stack (inspection-stack session))
         (object (cdr (first stack))))
    (multiple-value-bind (kind attributes parts total location)
        (inspect-view object start count)
      (list :object (short-print object 1000)
            :type (type-name object)
            :kind kind
            :path (reverse (mapcar #'car stack))
            :attributes (loop for (name . value) in attributes
                              collect (list :name name :value value))
            :location location
            :start start
            :total total
            :parts (loop for (label . value) in parts
                         for i from start
                         collect (list :index i :label label
                                       :value (short-print value)
                                       :drillable (and (has-parts-p value) t)))))))

(defun inspect-request (&key code part back (start 0) (count 50) session package id
                          max-output)
  "Inspect the value of CODE (a new inspection), or PART (a number) of the
current one, or go BACK one level; then show the current object's parts
from START (at most COUNT). Returns (:object S :type S :kind S :path
(LABEL...) :attributes ((:name :value)...) :location PLIST-OR-NIL :start N
:total N :parts ((:index :label :value :drillable)...)), or with CODE
failing :error (a condition plist) / :interrupted, or (:error MESSAGE).
Showing the object runs its PRINT-OBJECT methods, user code too: the whole
request is evaluation ID, so an interrupt (timeout, cancellation) ends it
wherever it is; an interruption while showing it has :showing T."
  (let* ((code-failure nil)
         (result
           (run-captured
            (lambda ()
              (catch 'too-deep
                (handler-bind ((storage-condition
                                 (lambda (c)
                                   (when (stack-exhaustion-p c)
                                     (throw 'too-deep
                                       (list :error "The data is too deep to print: showing it ran out of stack. Inspect a part of it instead (e.g. evaluate (first x) or (car x) in `code`)."))))))
                  (let ((reply (inspect-request-1 :code code :part part :back back
                                                  :start start :count count
                                                  :session session :package package
                                                  :id id :max-output max-output)))
                    (when (or (getf reply :interrupted) (getf reply :error))
                      (setf code-failure reply))
                    reply))))
            :id id :max-output (or max-output 50000) :warnings :muffle)))
    (cond (code-failure)
          ((getf result :interrupted)
           (list :interrupted t :where (getf result :where) :showing t))
          ((getf result :error)
           (list :error (getf result :error)))
          (t (first (getf result :value))))))

(defun inspect-request-1 (&key code part back start count session package id
                            max-output)
  "INSPECT-REQUEST's work, inside its evaluation."
  (let ((start (max 0 (or start 0)))
        (count (max 1 (min 500 (or count 50)))))
    (cond
      (code
       (let* ((result (run-user-forms code :session session :package package :id id
                                           :max-output max-output))
              (failure (run-failure result)))
         (when failure (return-from inspect-request-1 failure))
         (setf (inspection-stack session)
               (list (cons (truncate-string code 200) (first (getf result :value)))))))
      (part
       (let ((stack (inspection-stack session)))
         (unless stack
           (return-from inspect-request-1
             (list :error "Nothing is being inspected: pass `code` first.")))
         (multiple-value-bind (kind attributes parts total)
             (inspect-view (cdr (first stack)) part 1)
           (declare (ignore kind attributes))
           (unless (and (< -1 part total) parts)
             (return-from inspect-request-1
               (list :error (if (plusp total)
                                (format nil "No part ~D: the object has ~D part~:P (0 to ~D)."
                                        part total (1- total))
                                (format nil "No part ~D: the object has no parts." part)))))
           (setf (inspection-stack session)
                 (cons (first parts) stack)))))
      (back
       (let ((stack (inspection-stack session)))
         (unless (rest stack)
           (return-from inspect-request-1
             (list :error (if stack
                              "Already at the inspected value itself; there is nothing to go back to."
                              "Nothing is being inspected: pass `code` first."))))
         (setf (inspection-stack session) (rest stack)))))
    (unless (inspection-stack session)
      (return-from inspect-request-1
        (list :error "Nothing is being inspected: pass `code` first.")))
    (inspection-reply session start count)))

(defun debugger-inspect-in-frame (index code &key session package (start 0) (count 50))
  "Evaluate the forms of CODE in the lexical environment of frame INDEX of
the debugger this thread waits in (read in PACKAGE, default the frame's
package), and inspect the last value: it becomes SESSION's current
inspection, so PART and BACK go on from it. An error in CODE is answered as
(:error MESSAGE) rather than a nested debugger level; (:stopped T :stdout
\"\") when STOP-FRAME-EVALUATION ended it (evaluating or showing it)."
  (let ((value nil)
        ;; The unit's summary ("compilation unit aborted") is noise here.
        (*error-output* (make-broadcast-stream)))
    (with-code-forms (forms code (or package (frame-code-package index)))
      (let ((problem (exhausted-stack-problem)))
        (when problem
          (return-from debugger-inspect-in-frame problem)))
      (let ((reply
              (call-as-frame-evaluation
               (lambda ()
                 (handler-case
                     (progn
                       ;; Warnings stay out of the suspended evaluation's
                       ;; own report (EVAL-FORMS-IN-FRAME compiles in a
                       ;; unit of its own).
                       (handler-bind ((warning #'muffle-warning))
                         (setf value (first (eval-forms-in-frame forms index))))
                       (setf (inspection-stack session)
                             (list (cons (truncate-string code 200) value)))
                       (inspection-reply session (max 0 (or start 0))
                                         (max 1 (min 500 (or count 50)))))
                   (error (e)
                     (list :error (format nil "~A in frame ~D: ~A" (type-name e) index
                                          (print-capped e 2000))))
                   (storage-condition (c)
                     (if (stack-exhaustion-p c)
                         (list :error "The data is too deep to print: showing it ran out of stack. Inspect a part of it instead.")
                         (error c))))))))
        (if (eq reply :stopped)
            (list :stopped t :stdout "")
            reply)))))

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
  id depth name thread arguments evaluation (outcome :running) values)

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
                        (trace-record-values record) printed)))))))))))

(defun trace-record-plist (r)
  (list :id (trace-record-id r) :depth (trace-record-depth r)
        :name (trace-record-name r) :thread (trace-record-thread r)
        :arguments (trace-record-arguments r)
        :outcome (string-downcase (symbol-name (trace-record-outcome r)))
        :values (trace-record-values r)))

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
                                   string #+sbcl " or (method name qualifiers... (specializers...))" #-sbcl "")))
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
      (values nil (format nil "Cannot read ~S as a function name: ~A" string (print-capped e 300))))))

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
                            (install-trace spec #+sbcl 'trace-report-sbcl #-sbcl 'trace-report))
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

#+sbcl
(defun trace-report-sbcl (depth name event frame values)
  "SBCL's TRACE calls its :REPORT function with a frame too."
  (declare (ignore frame))
  (trace-report depth name event values))

;;; The profiler.

(defun profiler-noise-p (name)
  "Frames of the server and of the thread, evaluation and loading
machinery around the profiled code, which every sample passes through."
  (let ((symbol (frame-name-symbol name)))
    (cond ((null name) t)
          ((stringp name)
           (some (lambda (word) (search word name))
                 '("call_into_lisp" "funcall" "bogus" "trampoline"
                   ;; the function the profiled forms were compiled into
                   "(LAMBDA ()) in #<code")))
          ((null symbol) nil)
          ((our-package-p (symbol-package symbol)) t)
          ((member symbol '(eval funcall apply load)) t)
          ((implementation-internal-package-p (or (symbol-package symbol)
                                                  (find-package "KEYWORD")))
           (let ((n (symbol-name symbol)))
             (some (lambda (word) (search word n))
                   '("START-LISP" "TOPLEVEL" "EVAL" "THREAD" "RUN" "LOAD" "CALL-WITH"
                     "MUTEX" "REPL" "INTERRUPT" "PROCESS-" "DO-FORMS")))))))

(defun count-calls-of (specs thunk)
  "Call THUNK with each of SPECS (symbols or (SETF NAME)) counting its
calls; returns (values THUNK-VALUES COUNTS) with COUNTS ((SPEC . N)...)."
  (let ((counts (mapcar (lambda (s) (cons s 0)) specs)))
    (unwind-protect
         (progn
           (dolist (cell counts)
             (let ((cell cell))
               (swank/backend:wrap (car cell) 'cl-mcp-count
                                   :before (lambda (args)
                                             (declare (ignore args))
                                             (incf (cdr cell))))))
           (values (multiple-value-list (funcall thunk)) counts))
      (dolist (cell counts)
        (ignore-errors (swank/backend:unwrap (car cell) 'cl-mcp-count))))))

(defun profile-request (code &key (mode :cpu) (top 20) count-calls session package id
                               max-output)
  "Run CODE (compiled) under the statistical profiler in MODE (:cpu or
:alloc), counting calls of the functions named in COUNT-CALLS. Returns
(:samples N :mode S :functions ((:name S :self N :cumulative N :self-percent
F :cumulative-percent F)...) :calls ((:name :count)...)
:values (S...) :stdout :stderr :elapsed-ms), or :error (a condition plist) / :interrupted,
or (:error MESSAGE)."
  (let* ((package* (or (resolve-package package) (session-package session)))
         (specs '())
         (mode (if (member mode '(:alloc "alloc") :test #'equalp) :alloc :cpu))
         (top (max 1 (min 200 (or top 20))))
         (report nil)
         (counts nil))
    (dolist (text count-calls)
      (multiple-value-bind (spec error) (read-trace-spec text package*)
        (cond (error (return-from profile-request (list :error error)))
              ((not (or (symbolp spec) (eq (first spec) 'setf)))
               (return-from profile-request
                 (list :error (format nil "countCalls takes function names, not methods: ~A" text))))
              (t (push spec specs)))))
    (let* ((result (run-user-forms
                    code :session session :package package :id id :max-output max-output
                         :compile t
                         :around (lambda (thunk)
                                   (multiple-value-bind (vals calls)
                                       (count-calls-of
                                        specs
                                        (lambda ()
                                          (multiple-value-bind (vals profile)
                                              (call-with-statistical-profile thunk mode)
                                            (setf report profile)
                                            (values-list vals))))
                                     (setf counts calls)
                                     (values-list vals)))))
           (failure (run-failure result)))
      (when failure (return-from profile-request failure))
      (when (eq report :unsupported)
        (return-from profile-request
          (list :error (format nil "~A has no statistical profiler the server knows; profile-code needs SBCL (sb-sprof)."
                               (lisp-implementation-type)))))
      (let* ((samples (getf report :samples))
             (nodes (remove-if (lambda (n) (profiler-noise-p (first n)))
                               (getf report :nodes))))
        (flet ((entry (node)
                 (destructuring-bind (name self cumulative) node
                   (list :name (if (stringp name) name (short-print name 300))
                         :self self :cumulative cumulative
                         :self-percent (percent self samples)
                         :cumulative-percent (percent cumulative samples))))
               (top-by (key)
                 (let ((sorted (sort (copy-list nodes) #'> :key key)))
                   (subseq sorted 0 (min top (length sorted))))))
          (list :mode (string-downcase (symbol-name mode))
                :samples samples
                ;; The top functions by self samples, then those of the top
                ;; by cumulative samples not among them.
                :functions (mapcar #'entry
                                   (let ((by-self (top-by #'second)))
                                     (append by-self
                                             (sort (set-difference (top-by #'third) by-self)
                                                   #'> :key #'third))))
                :calls (loop for (spec . n) in (reverse counts)
                             collect (list :name (short-print spec) :count n))
                :values (printed-list (getf result :value))
                :stdout (getf result :stdout)
                :stderr (getf result :stderr)
                :warnings (getf result :warnings)
                :elapsed-ms (getf result :elapsed-ms)))))))

(defun percent (part whole)
  (if (and whole (plusp whole))
      (/ (round (* 1000 part) whole) 10.0)
      0.0))

;;; Threads.

(defparameter *protected-thread-names* '("control-thread" "reader-thread")
  "Swank's connection threads: killing one cuts the server off the image.")

(defun image-main-thread ()
  "The thread whose end ends the image: SBCL's main thread, else the one
that runs boot.lisp's MAIN in an image the server started (NIL attached to
a Lisp other than SBCL)."
  (or #+sbcl (sb-thread:main-thread)
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
    (swank/backend:interrupt-thread
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
    (and s #+sbcl (multiple-value-bind (v ok)
                      (ignore-errors (sb-thread:symbol-value-in-thread s thread nil))
                    (and ok v))
         #-sbcl nil)))

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
               (when (eq target (image-main-thread))
                 (return-from thread-request
                   (list :error (format nil "Thread ~A is the image's main thread: killing it ends the image and all its state. To start afresh, use image-restart."
                                        thread))))
               (when (member (swank/backend:thread-name target) *protected-thread-names*
                             :test #'equal)
                 (return-from thread-request
                   (list :error (format nil "Thread ~A is Swank's ~A: killing it would cut the server off the image."
                                        thread (swank/backend:thread-name target)))))
               (swank/backend:kill-thread target)
               (loop repeat 100 while (swank/backend:thread-alive-p target) do (sleep 0.01))
               (list :thread thread :done t
                     :message (if (swank/backend:thread-alive-p target)
                                  "Asked the thread to terminate; it is still unwinding."
                                  "The thread was terminated.")))
              (:interrupt
               ;; In an image the server started, the main thread only
               ;; waits on the server's lifeline: a debugger there has no
               ;; taker, is aborted, and the abort ends the image.
               (when (and (local-image-p) (eq target (image-main-thread)))
                 (return-from thread-request
                   (list :error (format nil "Thread ~A is the image's main thread, which only waits for the server: interrupting it would end the image and all its state. Interrupt an evaluation with image-interrupt instead."
                                        thread))))
               (swank/backend:interrupt-thread
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
