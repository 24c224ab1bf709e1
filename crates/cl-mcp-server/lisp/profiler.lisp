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
      (let* ((samples (getf report :samples))
             (nodes (remove-if (lambda (n) (profiler-noise-p (first n)))
                               (getf report :nodes))))
        (flet ((entry (node)
                 (destructuring-bind (name self cumulative) node
                   (list :name (profiled-name name)
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
                :stacks (folded-stacks (getf report :stacks))
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

(defun folded-stacks (stacks)
  "STACKS ((NAMES . COUNT)...) as folded lines \"ROOT;...;LEAF COUNT\", the
lines a flame graph is drawn from: the noise frames left out as in the
tables (stacks then alike merged), the most sampled first."
  (let ((counts (make-hash-table :test 'equal)))
    (loop for (names . n) in stacks
          for kept = (loop for name in names
                           unless (profiler-noise-p name)
                             ;; The folded format splits frames at ; and
                             ;; the count at the last space.
                             collect (substitute-if #\: (lambda (c) (member c '(#\; #\Newline #\Return)))
                                                    (profiled-name name)))
          ;; A sample taken as the profiler stopped.
          when (and kept (notany #'profiler-own-frame-p names))
            do (incf (gethash (format nil "~{~A~^;~}" kept) counts 0) n))
    (let ((lines (sort (loop for line being the hash-keys of counts using (hash-value n)
                             collect (cons line n))
                       #'> :key #'cdr)))
      (loop for (line . n) in lines
            repeat *most-folded-stacks*
            collect (format nil "~A ~D" line n)))))

(defun percent (part whole)
  (if (and whole (plusp whole))
      (/ (round (* 1000 part) whole) 10.0)
      0.0))
