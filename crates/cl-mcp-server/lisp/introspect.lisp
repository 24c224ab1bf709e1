;;;; introspect.lisp --- definitions, descriptions, cross references,
;;;; apropos and macroexpansion, through Swank's backend.
;;;;
;;;; Every function takes a symbol designator string the way a user writes it
;;;; (see RESOLVE-SYMBOL) and returns a plist; a name that does not resolve
;;;; gives (:error MESSAGE), never a Lisp error.

(in-package #:cl-mcp-server)

(defmacro with-resolved-symbol ((var designator package) &body body)
  (let ((err (gensym "ERR")))
    `(multiple-value-bind (,var ,err) (resolve-symbol ,designator :package ,package)
       (if ,err
           (list :error ,err)
           (progn ,@body)))))

(defun dspec-kind (dspec)
  "A short kind name for a definition spec such as (DEFUN FOO), or CLISP's
(FOO SYSTEM::DEFUN/DEFMACRO), (FOO (DEFMETHOD ...))."
  (let ((head (if (consp dspec) (first dspec) dspec)))
    ;; CLISP puts the name first and the kind second.
    (when (and (consp dspec) (consp (cdr dspec)) (symbolp head)
               (not (eql 0 (search "DEF" (symbol-name head)))))
      (let ((kind (if (consp (second dspec)) (first (second dspec)) (second dspec))))
        ;; A class or structure is recorded as (NAME (SETF FIND-CLASS)).
        (when (and (consp (second dspec)) (eq kind 'setf)
                   (eq (second (second dspec)) 'find-class))
          (let ((class (find-class head nil)))
            (setf kind (cond ((typep class 'structure-class) 'defstruct)
                             ((and class (subtypep class 'condition)) 'define-condition)
                             (t 'defclass)))))
        (when (and kind (symbolp kind) (eql 0 (search "DEF" (symbol-name kind))))
          (setf head (if (string= (symbol-name kind) "DEFUN/DEFMACRO")
                         (if (macro-function head) 'defmacro 'defun)
                         kind)))))
    (if (symbolp head)
        (let ((name (string-downcase (symbol-name head))))
          (cond ((string= name "defun") "function")
                ((string= name "defmacro") "macro")
                ((string= name "defgeneric") "generic-function")
                ((string= name "defmethod") "method")
                ((member name '("defvar" "defparameter") :test #'string=) "variable")
                ((string= name "defconstant") "constant")
                ((string= name "defclass") "class")
                ((string= name "defstruct") "structure")
                ((string= name "define-condition") "condition")
                ((string= name "deftype") "type")
                ((string= name "defpackage") "package")
                ((string= name "define-compiler-macro") "compiler-macro")
                ((string= name "define-setf-expander") "setf-expander")
                ((string= name "defsetf") "setf-expander")
                (t name)))
        (princ-to-string* head))))

(defun dspec-string (dspec)
  (let ((*package* (find-package "KEYWORD"))
        (*print-length* 10) (*print-level* 4))
    (prin1-to-string* dspec)))

(defun definition-plist (dspec location)
  (append (list :dspec (dspec-string dspec) :kind (dspec-kind dspec))
          (location-plist location :octets t :dspec dspec)))

(defun session-default (package session)
  "The package a bare name means: PACKAGE when given, else SESSION's
current package (where its evaluations left *PACKAGE*)."
  (or package (package-name (session-package session))))

(defun find-definitions (designator &key package session)
  "Where DESIGNATOR is defined: (:symbol \"PKG::NAME\" :definitions
((:dspec S :kind S :path P :offset N :line N :column N :context S :snippet S)
...)); a definition Swank cannot locate has :error instead of :path."
  (with-resolved-symbol (symbol designator (session-default package session))
    (with-file-cache ()
      (list :symbol (qualified-name symbol)
            :definitions
            ;; ABCL lists a generic function's DEFGENERIC twice.
            (loop for (dspec location) in (remove-duplicates
                                           (ignore-errors (backend-find-definitions symbol))
                                           :test #'equal :from-end t)
                  collect (definition-plist dspec location))))))

(defun symbol-kinds (symbol)
  (let ((kinds '()))
    (flet ((add (k) (push k kinds)))
      (cond ((special-operator-p symbol) (add "special-operator"))
            ((macro-function symbol) (add "macro"))
            ((and (fboundp symbol) (typep (fdefinition symbol) 'generic-function))
             (add "generic-function"))
            ((fboundp symbol) (add "function")))
      (when (fboundp `(setf ,symbol)) (add "setf-function"))
      (cond ((constantp symbol)
             (unless (or (keywordp symbol) (member symbol '(t nil)))
               (add "constant")))
            ((boundp symbol) (add "variable"))
            ((special-variable-p symbol) (add "variable")))
      (let ((class (find-class symbol nil)))
        (when class
          (let ((meta (string-downcase (symbol-name (type-of class)))))
            (add (cond ((search "structure" meta) "structure")
                       ((search "condition" meta) "condition")
                       ((search "built-in" meta) "built-in-class")
                       (t "class"))))))
      (when (and (not (find-class symbol nil))
                 (ignore-errors (swank/backend:type-specifier-p symbol)))
        (add "type"))
      (when (find-package (symbol-name symbol)) (add "package"))
      (when (keywordp symbol) (add "keyword")))
    (nreverse kinds)))

(defun arglist-string (symbol)
  (when (fboundp symbol)
    (let ((arglist (ignore-errors (function-arglist symbol))))
      (unless (eq arglist :not-available)
        (let ((*package* (or (symbol-package symbol) *package*))
              (*print-case* :downcase)
              (*print-pretty* nil))
          (if arglist (princ-to-string* arglist) "()"))))))

(defun documentation-strings (symbol)
  "Each documentation string of SYMBOL. Some Lisps (SBCL) answer the
STRUCTURE doc-type for any class with the class's documentation, so only
TYPE is asked, and labelled by what the class is."
  (let* ((class (find-class symbol nil))
         (type-label (cond ((null class) "type")
                           ((typep class 'structure-class) "structure")
                           ((subtypep class 'condition) "condition")
                           (t "class"))))
    (loop for (type label) in `((function "function") (variable "variable")
                                (type ,type-label) (setf "setf"))
          for doc = (ignore-errors (documentation symbol type))
          when doc collect (list :kind label :text doc))))

(defun describe-symbol (designator &key package session (max-output 20000))
  "What DESIGNATOR names: (:symbol S :kinds (S...) :arglist S-or-NIL
:documentation ((:kind S :text S)...) :value S-or-NIL :describe S).
:kinds are among function, macro, generic-function, special-operator,
setf-function, variable, constant, class, structure, condition,
built-in-class, type, package, keyword."
  (with-resolved-symbol (symbol designator (session-default package session))
    (list :symbol (qualified-name symbol)
          :kinds (symbol-kinds symbol)
          :arglist (arglist-string symbol)
          :documentation (documentation-strings symbol)
          :value (when (boundp symbol)
                   (let ((*print-length* 20) (*print-level* 4))
                     (truncate-string (prin1-to-string* (symbol-value symbol)) 2000)))
          :describe (truncate-string
                     (handler-case (with-output-to-string (s)
                                     (let ((*print-length* 20) (*print-level* 4))
                                       (describe symbol s)))
                       (error (e) (format nil "#<describe failed: ~A>" (princ-to-string* e))))
                     max-output))))

(defparameter *xref-kinds*
  '((:calls . swank/backend:who-calls)
    (:references . swank/backend:who-references)
    (:binds . swank/backend:who-binds)
    (:sets . swank/backend:who-sets)
    (:macroexpands . swank/backend:who-macroexpands)
    (:specializes . swank/backend:who-specializes)))

(defun location-path (location)
  "The file of a Swank location, or NIL."
  (and (consp location) (eq (first location) :location)
       (consp (second location)) (eq (first (second location)) :file)
       (second (second location))))

(defun xref (kind designator &key package session (limit 200) under)
  "Who KIND (one of :calls :references :binds :sets :macroexpands
:specializes, or its name as a string) DESIGNATOR: (:symbol S :kind S
:implemented T-or-NIL :count N :outside N :truncated T-or-NIL :refs ((:name S
:path P :offset N :line N :column N :context S) ...)). :implemented NIL
means this Lisp keeps no such data. With UNDER (a directory namestring),
references in files elsewhere are left out and counted in :outside. At most
LIMIT references are listed; :count is how many there are."
  (let* ((key (if (stringp kind) (intern (string-upcase kind) "KEYWORD") kind))
         (fn (cdr (assoc key *xref-kinds*))))
    (unless fn
      (return-from xref
        (list :error (format nil "Unknown xref kind ~A; use one of calls, references, binds, sets, macroexpands, specializes."
                             kind))))
    (with-resolved-symbol (symbol designator (session-default package session))
      (let* ((arg (if (eq key :specializes) (or (find-class symbol nil) symbol) symbol))
             (raw (handler-case (if (xref-available-p) (funcall fn arg) :not-implemented)
                    (error (e) (return-from xref
                                 (list :error (format nil "xref failed: ~A"
                                                      (princ-to-string* e))))))))
        (if (eq raw :not-implemented)
            (list :symbol (qualified-name symbol) :kind (string-downcase key)
                  :implemented nil :count 0 :outside 0 :truncated nil :refs nil)
            (let* ((under (and under (if (and (plusp (length under))
                                              (char= (char under (1- (length under))) #\/))
                                         under
                                         (concatenate 'string under "/"))))
                   (inside (if under
                               (remove-if-not
                                (lambda (r)
                                  (let ((path (location-path (second r))))
                                    (and (stringp path)
                                         (>= (length path) (length under))
                                         (string= under path :end2 (length under)))))
                                raw)
                               raw))
                   (count (length inside)))
              (with-file-cache ()
                (list :symbol (qualified-name symbol) :kind (string-downcase key)
                      :implemented t
                      :count count
                      :outside (- (length raw) count)
                      :truncated (> count limit)
                      :refs (loop for (dspec location) in inside
                                  for i from 0 below limit
                                  collect (append (list :name (dspec-string dspec))
                                                  (location-plist location :octets t
                                                                           :dspec dspec)))))))))))

(defun apropos-symbols (query &key package external-only (limit 200))
  "Symbols whose name contains QUERY (any case): (:count N :symbols
((:symbol \"PKG:NAME\" :kinds (S...)) ...)) with at most LIMIT entries,
sorted by name; :count is the total. PACKAGE limits the search to symbols
present in that package; EXTERNAL-ONLY to its (or every package's)
external symbols."
  (multiple-value-bind (pkg err) (resolve-package package)
    (when err (return-from apropos-symbols (list :error err)))
    (let ((seen (make-hash-table :test 'eq))
          (found '()))
      (flet ((consider (symbol home)
               (when (and (not (gethash symbol seen))
                          (search query (symbol-name symbol) :test #'char-equal)
                          (or (not external-only)
                              (eq :external (nth-value 1 (find-symbol (symbol-name symbol)
                                                                      home)))))
                 (setf (gethash symbol seen) t)
                 (push symbol found))))
        (if pkg
            (do-symbols (s pkg) (when (eq (symbol-package s) pkg) (consider s pkg)))
            (dolist (p (list-all-packages))
              (do-symbols (s p) (when (eq (symbol-package s) p) (consider s p))))))
      (let ((sorted (sort found #'string< :key #'qualified-name)))
        (list :count (length sorted)
              :symbols (loop for s in sorted
                             for i from 0 below limit
                             collect (list :symbol (qualified-name s)
                                           :kinds (symbol-kinds s))))))))

(defun present-symbols (package)
  "The symbols present (internal or external) in PACKAGE, as an EQ set."
  (let ((set (make-hash-table :test 'eq)))
    (do-symbols (s package)
      (when (eq (symbol-package s) package) (setf (gethash s set) t)))
    set))

(defun unintern-new-symbols (form package before)
  "Unintern the symbols of FORM that reading interned into PACKAGE (those
not in BEFORE), so expanding a form leaves no junk symbols behind."
  (let ((seen (make-hash-table :test 'eq)) (count 0))
    (labels ((walk (x)
               (cond ((> (incf count) 100000))
                     ((symbolp x)
                      (when (and x (eq (symbol-package x) package)
                                 (not (gethash x before)))
                        (unintern x package)))
                     ((consp x)
                      (unless (gethash x seen)
                        (setf (gethash x seen) t)
                        (walk (car x)) (walk (cdr x))))
                     ((and (arrayp x) (not (stringp x)))
                      (dotimes (i (min 1000 (array-total-size x)))
                        (walk (row-major-aref x i)))))))
      (walk form))))

(defun guarded-macroexpand-hook (expander form env)
  "*MACROEXPAND-HOOK* for code-macroexpand: refuses to go on once three
quarters of the stack are used."
  (when (< (stack-room) 0.25)
    (error "The expansion nests too deeply: three quarters of the control stack are used. ~
A macro that expands into itself without end (or a very deep form) cannot be ~
expanded completely; try mode 1."))
  (funcall expander form env))

(defun macroexpand-form (form-string &key package session (mode :all))
  "Macroexpand the form in FORM-STRING, read in PACKAGE (default SESSION's
current package): MODE :ONE (or \"1\") expands once (MACROEXPAND-1), :ALL
expands every macro in the form. Symbols that reading interned are
uninterned again afterwards. Returns (:expansion S :expanded T-or-NIL) or
(:error MESSAGE)."
  (multiple-value-bind (pkg err) (resolve-package (session-default package session))
    (when err (return-from macroexpand-form (list :error err)))
    (let ((*package* pkg)
          (before (present-symbols pkg))
          (form nil)
          (mode (if (stringp mode)
                    (if (string= mode "1") :one (intern (string-upcase mode) "KEYWORD"))
                    mode)))
      (unwind-protect
           (handler-case
               (let* ((read (let ((*read-eval* nil)) (read-from-string form-string)))
                      (expansion (progn
                                   (setf form read)
                                   ;; Stop a runaway expansion before the
                                   ;; stack runs out (fatal when it happens
                                   ;; mid-allocation).
                                   (let ((*macroexpand-hook* #'guarded-macroexpand-hook))
                                     (if (member mode '(:one 1))
                                         (macroexpand-1 read)
                                         (macroexpand-all-form read))))))
                 (list :expansion (let ((*print-case* :downcase)
                                        (*print-pretty* t)
                                        (*print-right-margin* 100)
                                        (*print-circle* t))
                                    (prin1-to-string* expansion))
                       :expanded (not (equal read expansion))))
             ;; SERIOUS-CONDITION: stack or heap exhaustion while reading,
             ;; expanding or printing unwinds here (resetting the stack
             ;; guard) and is the form's fault, not a helper failure.
             (serious-condition (e)
               (list :error (format nil "~A: ~A" (type-name e) (print-capped e 5000)))))
        (when form (unintern-new-symbols form pkg before))))))

(defun package-info (name &key (limit 500))
  "Facts about the package NAME: (:name S :nicknames (S...) :use (S...)
:used-by (S...) :documentation S-or-NIL :external-count N :externals (S...))
with at most LIMIT external symbol names, sorted; or (:error MESSAGE)."
  (multiple-value-bind (package err) (resolve-package name)
    (cond (err (list :error err))
          ((null package) (list :error "Name a package."))
          (t
           (let ((externals '()))
             (do-external-symbols (s package) (push (symbol-name s) externals))
             (setf externals (sort externals #'string<))
             (list :name (package-name package)
                   :nicknames (package-nicknames package)
                   :use (mapcar #'package-name (package-use-list package))
                   :used-by (mapcar #'package-name (package-used-by-list package))
                   :documentation (documentation package t)
                   :external-count (length externals)
                   :externals (subseq externals 0 (min limit (length externals)))))))))
