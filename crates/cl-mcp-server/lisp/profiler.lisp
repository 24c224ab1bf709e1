;;;; profiler.lisp --- the statistical profiler over user code, and call
;;;; counts.

(in-package #:cl-mcp-server)

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
          ((profiler-own-frame-p name) t)
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
F :cumulative-percent F)...) :stacks (\"ROOT;...;LEAF N\"...) :calls ((:name :count)...)
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
      (multiple-value-bind (samples unattributed nodes stacks)
          (profile-tables (getf report :stacks) specs)
        (flet ((entry (node)
                 (destructuring-bind (name self cumulative) node
                   (list :name name
                         :self self :cumulative cumulative
                         :self-percent (percent self samples)
                         :cumulative-percent (percent cumulative samples))))
               (top-by (key)
                 (let ((sorted (sort (copy-list nodes) #'> :key key)))
                   (subseq sorted 0 (min top (length sorted))))))
          (list :mode (string-downcase (symbol-name mode))
                :samples samples
                :unattributed unattributed
                ;; The top functions by self samples, then those of the top
                ;; by cumulative samples not among them.
                :functions (mapcar #'entry
                                   (let ((by-self (top-by #'second)))
                                     (append by-self
                                             (sort (set-difference (top-by #'third) by-self)
                                                   #'> :key #'third))))
                :stacks stacks
                :calls (loop for (spec . n) in (reverse counts)
                             collect (list :name (short-print spec) :count n))
                :values (printed-list (getf result :value))
                :stdout (getf result :stdout)
                :stderr (getf result :stderr)
                :warnings (getf result :warnings)
                :elapsed-ms (getf result :elapsed-ms)))))))

(defun profiler-own-frame-p (name)
  (let ((symbol (frame-name-symbol name)))
    (and symbol (symbol-package symbol)
         (string= (package-name (symbol-package symbol)) "SB-SPROF"))))

(defun profiled-name (name)
  (if (stringp name) name (short-print name 300)))

(defparameter *most-folded-stacks* 3000
  "Most distinct stacks a profile sends for its flame graph (the most
sampled ones).")

;; Named so that no function's printed name can be it.
(defparameter *unattributed-frame* "(the code's own forms)"
  "The flame graph's frame for samples in no function the code called:
in the profiled forms themselves.")

(defun counting-wrapper-frame-p (name)
  "Frames of countCalls' wrapper around a counted function (Swank's WRAP
over SBCL's encapsulation, which calls our counting closure, and the &REST
list and APPLY they make, whose frames can come before the wrapper's own).
Not COUNT-CALLS-OF: it is below the profiled code on every stack."
  (let ((symbol (frame-name-symbol name)))
    (cond ((stringp name)
           ;; foreign and assembly routines
           (some (lambda (word) (search word name))
                 '("listify_rest_arg" "TAIL-CALL-CALLABLE-VARIABLE" "LISTIFY-&REST")))
          ((and symbol (symbol-package symbol)
                (or (our-package-p (symbol-package symbol))
                    (implementation-internal-package-p (symbol-package symbol))))
           (member (symbol-name symbol)
                   '("SBCL-WRAP" "WRAP" "ENCAPSULATION"
                     "TAIL-CALL-CALLABLE-VARIABLE" "LISTIFY-&REST")
                   :test #'string=)))))

(defun profiled-frames (names specs)
  "The printed names of the frames of a sampled stack NAMES (root first)
the profile shows: not noise, and, when SPECS (the counted functions) are
wrapped, none from a counting wrapper's frame to the counted function it
calls (its cost stays with the caller). The folded format splits frames at
; and the count at the last space, so those are replaced."
  (let ((in-wrapper nil))
    (loop for (caller name) on (cons nil names)
          while name
          do (cond ((and specs
                         (or (counting-wrapper-frame-p name)
                             ;; The wrapper's &REST list as it is entered,
                             ;; before its own frame is (compiled code
                             ;; calls LIST only through APPLY or FUNCALL).
                             (and (eq name 'list) (member caller specs :test #'equal))))
                    (setf in-wrapper t))
                   ((and in-wrapper (member name specs :test #'equal)) (setf in-wrapper nil)))
          unless (or in-wrapper (profiler-noise-p name))
            collect (substitute-if #\: (lambda (c) (member c '(#\; #\Newline #\Return)))
                                   (profiled-name name)))))

(defun profile-tables (stacks specs)
  "From the sampled STACKS ((NAMES . COUNT)...), SPECS the counted
functions: (values SAMPLES UNATTRIBUTED NODES FOLDED). A sample taken as
the profiler stopped (an SB-SPROF frame on its stack) is left out whole.
UNATTRIBUTED counts the samples with no frame kept (in the profiled forms
themselves), drawn as *UNATTRIBUTED-FRAME*. NODES ((NAME SELF CUMULATIVE)...):
SELF the samples whose last kept frame is NAME, CUMULATIVE those with NAME
on the stack, once per sample however deep a recursion. FOLDED the lines
\"ROOT;...;LEAF COUNT\" a flame graph is drawn from, the most sampled first
(at most *MOST-FOLDED-STACKS*): tables and graph count the same samples."
  (let ((folded (make-hash-table :test 'equal))
        (self (make-hash-table :test 'equal))
        (cumulative (make-hash-table :test 'equal))
        (samples 0)
        (unattributed 0))
    (loop for (names . n) in stacks
          for kept = (profiled-frames names specs)
          unless (some #'profiler-own-frame-p names)
            do (incf samples n)
               (if kept
                   (progn (incf (gethash (car (last kept)) self 0) n)
                          (dolist (name (remove-duplicates kept :test #'string=))
                            (incf (gethash name cumulative 0) n)))
                   (incf unattributed n))
               (incf (gethash (format nil "~{~A~^;~}" (or kept (list *unattributed-frame*)))
                              folded 0)
                     n))
    (values samples
            unattributed
            (loop for name being the hash-keys of cumulative using (hash-value c)
                  collect (list name (gethash name self 0) c))
            (let ((lines (sort (loop for line being the hash-keys of folded using (hash-value n)
                                     collect (cons line n))
                               #'> :key #'cdr)))
              (loop for (line . n) in lines
                    repeat *most-folded-stacks*
                    collect (format nil "~A ~D" line n))))))

(defun percent (part whole)
  (if (and whole (plusp whole))
      (/ (round (* 1000 part) whole) 10.0)
      0.0))
