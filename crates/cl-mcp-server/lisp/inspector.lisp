;;;; inspector.lisp --- the inspector: a per-session stack of inspected
;;;; objects shown as numbered parts.

(in-package #:cl-mcp-server)

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

;; Long: one short case per kind of object, read best side by side.
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
      (let ((problem (frame-code-problem index)))
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
