;;;; frameworks.lisp --- what a test run's outcome was, per test framework.
;;;;
;;;; TEST-SYSTEM (test-run.lisp) asks here how a run ended. The framework's own
;;;; result objects come first (FiveAM's, recorded by test-run.lisp's hook;
;;;; Fiasco's test-run contexts, read below); otherwise the summary the
;;;; framework printed is read, by one reader per framework, each written
;;;; against that framework's real output (the transcripts under
;;;; lisp/tests/transcripts/). Output no reader recognises is :UNKNOWN,
;;;; never a success.

(in-package #:cl-mcp-server)

;;; Reading printed summaries.

(defun strip-ansi (text)
  "TEXT without ANSI escape sequences (ESC [ ... letter), which Rove prints
to colour its report."
  (if (not (find (code-char 27) text))
      text
      (with-output-to-string (out)
        (let ((i 0) (n (length text)))
          (loop while (< i n)
                do (let ((c (char text i)))
                     (if (and (char= c (code-char 27)) (< (1+ i) n)
                              (char= (char text (1+ i)) #\[))
                         (let ((end (position-if #'alpha-char-p text :start (+ i 2))))
                           (setf i (if end (1+ end) n)))
                         (progn (write-char c out) (incf i)))))))))

(defun text-lines (text)
  "The lines of TEXT, each trimmed of blanks."
  (let ((lines '()) (start 0))
    (loop for end = (position #\Newline text :start start)
          do (push (string-trim '(#\Space #\Tab #\Return) (subseq text start (or end (length text))))
                   lines)
             (if end (setf start (1+ end)) (return)))
    (nreverse lines)))

(defun prefixp (prefix line)
  (and (>= (length line) (length prefix))
       (string= prefix line :end2 (length prefix))))

(defun count-after (prefix line)
  "The integer right after PREFIX (blanks allowed) when LINE starts with
PREFIX, else NIL."
  (when (prefixp prefix line)
    (let ((begin (position-if-not (lambda (c) (member c '(#\Space #\Tab))) line
                                  :start (length prefix))))
      (when (and begin (digit-char-p (char line begin)))
        (values (parse-integer line :start begin :junk-allowed t))))))

(defun leading-count (line)
  "The integer LINE starts with, and where it ends; NIL when none."
  (let ((end (position-if-not #'digit-char-p line)))
    (when (and (plusp (length line)) (digit-char-p (char line 0)))
      (values (parse-integer line :end end) (or end (length line))))))

(defun sum-counts (prefix lines)
  "The sum of COUNT-AFTER PREFIX over LINES, or NIL when no line has it."
  (let ((total nil))
    (dolist (line lines total)
      (let ((n (count-after prefix line)))
        (when n (setf total (+ (or total 0) n)))))))

(defun counts (framework passed failed skipped)
  (list :framework framework :passed passed :failed failed :skipped skipped))

;; FiveAM's RUN! and EXPLAIN!: " Did 4 checks." then "Pass: 3 (75%)",
;; "Skip: 0 ( 0%)", "Fail: 1 (25%)"; once per suite run.
(defun fiveam-summary (lines)
  (let ((did (sum-counts "Did" lines))
        (pass (sum-counts "Pass:" lines))
        (fail (sum-counts "Fail:" lines)))
    (when (and did pass fail)
      (counts "fiveam" pass fail (or (sum-counts "Skip:" lines) 0)))))

;; Parachute's plain report: ";; Summary:" then "Passed: 3", "Failed: 1",
;; "Skipped: 0"; once per TEST call.
(defun parachute-summary (lines)
  (let ((passed (sum-counts "Passed:" lines))
        (failed (sum-counts "Failed:" lines)))
    (when (and passed failed (member ";; Summary:" lines :test #'string=))
      (counts "parachute" passed failed (or (sum-counts "Skipped:" lines) 0)))))

(defun rove-line-counts (line)
  "(FAILED . TOTAL) from Rove's \"× 1 of 2 tests failed\", (0 . PASSED)
from \"✓ 2 tests completed\", else NIL."
  (flet ((after-mark (mark)
           (and (prefixp mark line)
                (string-left-trim " " (subseq line (length mark))))))
    (let ((failed (after-mark (string (code-char #xD7))))
          (passed (after-mark (string (code-char #x2713)))))
      (cond ((and failed (or (search "tests failed" failed) (search "test failed" failed)))
             (multiple-value-bind (n end) (leading-count failed)
               (let ((total (and n (count-after " of" (subseq failed end)))))
                 (and total (cons n total)))))
            ((and passed (or (search "tests completed" passed) (search "test completed" passed)))
             (let ((n (leading-count passed)))
               (and n (cons 0 n))))))))

;; Rove: "× 1 of 2 tests failed" or "✓ 2 tests completed", the count being
;; of tests (the packages a system's run covers); once per RUN.
(defun rove-summary (lines)
  (let ((failed nil) (total 0))
    (dolist (line lines)
      (let ((c (rove-line-counts line)))
        (when c
          (setf failed (+ (or failed 0) (car c)))
          (incf total (cdr c)))))
    (when failed
      (counts "rove" (- total failed) failed 0))))

;; lisp-unit2's WITH-SUMMARY-CONTEXT: "Test Summary for :PKG (2 tests 0.05
;; sec)" then "| 4 assertions total", "| 3 passed", "| 1 failed", "| 0
;; execution errors", ... Each test's own line ("... : 2 assertions
;; passed") is not the total.
(defun lisp-unit2-summary (lines)
  (let ((found nil) (passed 0) (failed 0))
    (loop for (line . rest) on lines
          when (prefixp "Test Summary for" line)
            do (let ((block (loop for l in rest while (prefixp "|" l)
                                  collect (string-left-trim "| " l))))
                 (flet ((n (suffix)
                          (loop for l in block
                                thereis (multiple-value-bind (n end) (leading-count l)
                                          (and n (string= suffix (subseq l end)) n)))))
                   (when (and (n " passed") (n " failed"))
                     (setf found t)
                     (incf passed (n " passed"))
                     (incf failed (+ (n " failed") (or (n " execution errors") 0)))))))
    (when found
      (counts "lisp-unit2" passed failed 0))))

;; RT's DO-TESTS: "Doing 2 pending tests of 2 tests total." then "No tests
;; failed." or "1 out of 2 total tests failed: PKG::NAME."
(defun rt-summary (lines)
  (let ((ran (loop for l in lines thereis (count-after "Doing" l)))
        (failed (loop for l in lines
                      thereis (multiple-value-bind (n end) (leading-count l)
                                (and n (prefixp " out of " (subseq l end))
                                     (search "total tests failed" l) n)))))
    (cond ((and ran failed) (counts "rt" (max 0 (- ran failed)) failed 0))
          ((and ran (member "No tests failed." lines :test #'string=))
           (counts "rt" ran 0 0)))))

;; ptester's WITH-TESTS: "End NAME test", "Errors detected in this test: 1
;; UNEXPECTED: 1", "Successes this test:1"; known failures are errors but
;; not unexpected ones. A body that signals is "Test NAME aborted by
;; signalling an uncaught error" (on *ERROR-OUTPUT*).
(defun ptester-summary (lines)
  (let ((passed (sum-counts "Successes this test:" lines)))
    (when (and passed (find-if (lambda (l) (prefixp "Errors detected in this test:" l)) lines))
      (counts "ptester" passed
              (+ (loop for l in lines
                       for at = (and (prefixp "Errors detected in this test:" l)
                                     (search "UNEXPECTED:" l))
                       sum (or (and at (count-after "UNEXPECTED:" (subseq l at))) 0))
                 (count-if (lambda (l) (and (prefixp "Test " l)
                                            (search "aborted by signalling an uncaught error" l)))
                           lines))
              0))))

;; xlunit's TEXTUI-TEST-RUN: "OK (2 tests)", or "FAILURES!!!" then "Run: 2
;; Failures: 1   Errors: 0".
(defun xlunit-summary (lines)
  (let ((passed 0) (failed 0) (found nil))
    (dolist (l lines)
      (let ((ok (count-after "OK (" l))
            (run (count-after "Run:" l)))
        (cond ((and ok (search " test" l)) (setf found t) (incf passed ok))
              ((and run (search "Failures:" l) (search "Errors:" l))
               (let ((bad (+ (count-after "Failures:" (subseq l (search "Failures:" l)))
                             (count-after "Errors:" (subseq l (search "Errors:" l))))))
                 (setf found t)
                 (incf failed bad)
                 (incf passed (max 0 (- run bad))))))))
    (when found (counts "xlunit" passed failed 0))))

;; Edi Weitz's runners (CL-PPCRE's, flexi-streams'): "All tests passed."
;; or "Some tests failed." last; the failures are the lines before it (see
;; WEITZ-FAILURES), which count them.
(defun weitz-summary (lines)
  (cond ((member "All tests passed." lines :test #'string=)
         (list :framework "weitz" :passed nil :failed 0 :skipped 0))
        ((member "Some tests failed." lines :test #'string=)
         (list :framework "weitz" :passed nil
               :failed (max 1 (length (weitz-failures lines))) :skipped 0))))

(defparameter *summary-readers*
  '(fiveam-summary parachute-summary rove-summary lisp-unit2-summary
    rt-summary ptester-summary xlunit-summary weitz-summary)
  "One reader per framework whose printed summary is known: each takes the
output's trimmed lines and returns (:framework S :passed N :failed N
:skipped N) or NIL.")

;;; Failures itemised in printed output: for the frameworks whose results
;;; are not objects the server reads (RT, ptester, Edi Weitz's runners),
;;; each failure as (:test S :message S :form S-or-NIL), S the test's name
;;; as printed, FORM the failed form's printed text.

(defun join-lines (lines)
  (format nil "~{~A~^ ~}" lines))

(defun lines-until (predicate lines)
  "The lines of LINES before the first one PREDICATE accepts."
  (loop for l in lines until (funcall predicate l) collect l))

(defun failure (test message &optional form)
  (list :test test :message (truncate-string message 2000)
        :form (and form (truncate-string form 2000))))

(defun string-between (line prefix suffix)
  "The text of LINE between PREFIX (which starts it) and SUFFIX (which ends
it), or NIL."
  (and (prefixp prefix line)
       (>= (length line) (+ (length prefix) (length suffix)))
       (string= suffix line :start2 (- (length line) (length suffix)))
       (subseq line (length prefix) (- (length line) (length suffix)))))

;; RT: "Test PKG::NAME failed", then "Form: F", "Expected value: E",
;; "Actual value: A."; and the summary "1 out of 249 total tests failed:
;; PKG::A, PKG::B." naming each (a test RT printed no form of is named
;; only). Alexandria runs its tests twice: each name once.
(defun rt-failures (lines)
  (let ((failures '()))
    (loop for (line . rest) on lines
          for name = (string-between line "Test " " failed")
          when (and name (not (find #\Space name)))
            do (flet ((field (prefix)
                        (let ((l (find-if (lambda (l) (prefixp prefix l))
                                          (subseq rest 0 (min 3 (length rest))))))
                          (and l (string-trim " " (subseq l (length prefix)))))))
                 (let ((form (field "Form:"))
                       (expected (field "Expected value:"))
                       (actual (field "Actual value:")))
                   (unless (find name failures :key #'second :test #'string=)
                     (push (failure name
                                    (if (or expected actual)
                                        (format nil "expected ~A, got ~A" expected
                                                (string-right-trim "." (or actual "?")))
                                        "failed")
                                    form)
                           failures)))))
    (dolist (line lines)
      (let ((at (search "total tests failed:" line)))
        (when (and at (leading-count line))
          (dolist (name (uiop:split-string
                         (string-right-trim "." (subseq line (+ at (length "total tests failed:"))))
                         :separator '(#\Space #\,)))
            (when (and (plusp (length name))
                       (not (find name failures :key #'second :test #'string=)))
              (push (failure name "failed (RT printed no value)") failures))))))
    (nreverse failures)))

;; ptester: "Begin NAME test" opens a WITH-TESTS; a failed check is
;; "Test failed: FORM", "  wanted: E", "     got: A" (known failures are
;; "EXPECTED" ones, not counted); a body that signals is "Test NAME aborted
;; by signalling an uncaught error:" then the condition, to a blank line.
(defun ptester-failures (lines)
  (let ((failures '()) (test "ptester") (expected-failure nil))
    (loop for (line . rest) on lines
          do (let ((begin (string-between line "Begin " " test"))
                   (form (and (prefixp "Test failed:" line)
                              (string-trim " " (subseq line (length "Test failed:")))))
                   (aborted (search " aborted by signalling an uncaught error" line)))
               (cond (begin (setf test begin))
                     ((search "* * * EXPECTED TEST FAILURE" line) (setf expected-failure t))
                     ((search "* * * UNEXPECTED TEST FAILURE" line) (setf expected-failure nil))
                     (form
                      (unless expected-failure
                        (let ((detail (lines-until (lambda (l)
                                                     (or (prefixp "Test failed:" l)
                                                         (search "* * *" l)
                                                         (prefixp "Begin " l)
                                                         (prefixp "End " l)
                                                         (zerop (length l))))
                                                   rest)))
                          (push (failure test (if detail (join-lines detail) "failed") form)
                                failures)))
                      (setf expected-failure nil))
                     ((and aborted (prefixp "Test " line))
                      (let ((name (subseq line (length "Test ") aborted))
                            (message (join-lines
                                      (lines-until (lambda (l) (or (zerop (length l))
                                                                   (prefixp ";" l)
                                                                   (prefixp "End " l)))
                                                   rest))))
                        (push (failure name (format nil "aborted by signalling an uncaught error: ~A"
                                                    message))
                              failures))))))
    (nreverse failures)))

;; Edi Weitz's runners. flexi-streams: "Test suite: \"NAME\"" opens a
;; suite; "Test FORM failed." (FORM over several lines), "Test FORM failed
;; signalling error of type T: M.", "Expected condition C not signalled.".
;; CL-PPCRE: "Test: NAME" opens a group, then per failed test "  19:" and
;; its messages, one a line ("FORM returned NIL").
(defun weitz-failures (lines)
  (let ((failures '()) (suite nil))
    (loop for (line . rest) on lines
          do (cond ((prefixp "Test suite:" line)
                    (setf suite (string-trim " \"" (subseq line (length "Test suite:")))))
                   ((prefixp "Test: " line)
                    (setf suite (subseq line (length "Test: "))))
                   ((and (prefixp "Test " line) (not (prefixp "Test: " line)))
                    ;; The form may go on over the next lines, to "failed".
                    (let* ((more (loop for l in (cons line rest)
                                       for i from 0 below 30
                                       collect l
                                       until (search " failed" l)))
                           (text (subseq (join-lines more) (length "Test ")))
                           (at (search " failed" text)))
                      (when at
                        (push (failure (or suite "test")
                                       (if (search "signalling error" text :start2 at)
                                           (string-right-trim "." (subseq text (1+ at)))
                                           "failed")
                                       (subseq text 0 at))
                              failures))))
                   ((prefixp "Expected condition " line)
                    (push (failure (or suite "test") (string-right-trim "." line)) failures))
                   ((and (leading-count line)
                         (multiple-value-bind (n end) (leading-count line)
                           (declare (ignore n))
                           (string= ":" (subseq line end))))
                    (let ((messages (lines-until (lambda (l)
                                                   (or (zerop (length l))
                                                       (every (lambda (c) (char= c #\.)) l)
                                                       (prefixp "Test" l)
                                                       (and (leading-count l)
                                                            (find #\: l))))
                                                 rest)))
                      (push (failure (format nil "~@[~A ~]#~A" suite (string-right-trim ":" line))
                                     (if messages (join-lines messages) "failed")
                                     (let ((m (first messages)))
                                       (and m (search " returned " m)
                                            (subseq m 0 (search " returned " m)))))
                            failures)))))
    (nreverse failures)))

(defparameter *failure-readers*
  '(("rt" . rt-failures) ("ptester" . ptester-failures) ("weitz" . weitz-failures))
  "The frameworks whose printed failures are read, with their readers.")

(defun output-failures (framework text)
  "The failures FRAMEWORK (a summary's :framework) itemised in TEXT, the
run's output: (:test S :message S :form S-or-NIL) each, in order. With
FRAMEWORK NIL (a run that ended in an error before its summary), the
first framework's failures found, and that framework as a second value."
  (let ((lines (text-lines (strip-ansi text))))
    (if framework
        (let ((reader (cdr (assoc framework *failure-readers* :test #'equal))))
          (values (and reader (funcall reader lines)) framework))
        (loop for (name . reader) in *failure-readers*
              for failures = (funcall reader lines)
              when failures return (values failures name)))))

(defun summarize-test-output (text)
  "Pass/fail counts from the summary a known test framework printed in
TEXT: (:framework S :passed N :failed N :skipped N), or NIL when none is
recognised. Known: FiveAM, Parachute, Rove, lisp-unit2, RT, ptester,
xlunit (Fiasco prints no summary of a passing run; its results are read
from its result objects, FIASCO-RECORDS)."
  (let ((lines (text-lines (strip-ansi text))))
    (some (lambda (reader) (funcall reader lines)) *summary-readers*)))

;;; Fiasco's own results: every top-level run pushes a context onto
;;; FIASCO:*TEST-RESULT-HISTORY*.

(defun fiasco-symbol (name)
  (let ((package (find-package "FIASCO")))
    (and package (find-symbol name package))))

(defun fiasco-history ()
  "Fiasco's list of top-level test-run contexts, newest first (NIL when
Fiasco is not loaded)."
  (let ((s (fiasco-symbol "*TEST-RESULT-HISTORY*")))
    (and s (boundp s) (symbol-value s))))

(defun fiasco-call (name &rest args)
  (apply (fiasco-symbol name) args))

(defun fiasco-records (history-before)
  "One record per check of the Fiasco runs since the history was
HISTORY-BEFORE, oldest first, in the shape of test-run.lisp's FiveAM records:
(:framework \"fiasco\" :status :passed|:failed|:skipped :test S :message S
:form S). Expected failures are neither passed nor failed."
  (let ((new (ldiff (fiasco-history) history-before))
        (records '()))
    (dolist (context (reverse new) (nreverse records))
      (ignore-errors
       (let* ((stats (fiasco-call "EXTRACT-TEST-RUN-STATISTICS" context))
              (failures (fiasco-call "FAILURES-OF" context))
              (failed-assertions (getf stats :number-of-failed-assertions 0)))
         (loop repeat (max 0 (- (getf stats :number-of-assertions 0) failed-assertions))
               do (push (list :framework "fiasco" :status :passed) records))
         (loop repeat (getf stats :number-of-skips 0)
               do (push (list :framework "fiasco" :status :skipped) records))
         (dolist (f (reverse failures))
           (unless (ignore-errors (fiasco-call "EXPECTED-P" f))
             (push (fiasco-failure-record f) records))))))))

(defun fiasco-failure-record (failure)
  "The record of one Fiasco failure: its test, its description (on one
line) and, for a failed assertion, its form."
  (let* ((context (ignore-errors (fiasco-call "CONTEXT-OF" failure)))
         (test (and context (ignore-errors (fiasco-call "TEST-OF" context))))
         (name (and test (ignore-errors (fiasco-call "NAME-OF" test))))
         (form (ignore-errors (fiasco-call "FORM-OF" failure)))
         ;; (IS form): the form, as FiveAM's failures show it.
         (form (if (and (consp form) (symbolp (car form)) (string= (car form) "IS")
                        (consp (cdr form)) (null (cddr form)))
                   (second form)
                   form)))
    (list :framework "fiasco" :status :failed
          :test (and name (symbolp name) (qualified-name name))
          :message (one-line (truncate-string
                              (or (ignore-errors
                                   (with-output-to-string (s) (describe-object failure s)))
                                  (princ-to-string* failure))
                              5000))
          :form (and form
                     (let ((*print-pretty* t) (*print-right-margin* 100000)
                           (*print-length* 100) (*print-level* 10))
                       (truncate-string (one-line (prin1-to-string* form)) 2000))))))

;;; The outcome of a run.

(defun test-outcome (summary &key error)
  "How a run ended: :ERROR when the build or run signalled (or was
interrupted), else :FAILED or :PASSED by SUMMARY's failures, :UNKNOWN when
there is no SUMMARY (no framework's results or summary recognised)."
  (cond (error :error)
        ((null summary) :unknown)
        ((eql 0 (getf summary :failed)) :passed)
        (t :failed)))

;;; The tail of a run's output, for the summary readers: the reply keeps
;;; only the head of a long output, and summaries come last.

(defclass tail-stream (#.(gray-symbol "FUNDAMENTAL-CHARACTER-OUTPUT-STREAM"))
  ((target :initarg :target)
   (buffer :initform (make-array 0 :element-type 'character :adjustable t :fill-pointer 0))
   (line :initform (make-array 0 :element-type 'character :adjustable t :fill-pointer 0))
   (keep :initarg :keep :initform 65536)
   (column :initform 0))
  (:documentation "Writes through to TARGET and keeps the last KEEP (up to
twice that) characters written, but the compiler's lines (COMPILER-LINE-P):
the suite's own output, which compiler notes printed first cannot push
out. A Gray stream of its own rather than a broadcast stream, which ABCL
builds only of native streams."))

(defun compiler-line-p (line)
  "Whether LINE is the compiler's (SBCL's \"; caught WARNING:\", \"; in:
DEFUN F\", ECL's \";;; Compiling\"), not a suite's: one semicolon or three
start it (Parachute's report lines start with two)."
  (and (plusp (length line))
       (char= (char line 0) #\;)
       (or (= (length line) 1)
           (char/= (char line 1) #\;)
           (and (> (length line) 2) (char= (char line 2) #\;)))))

(defun tail-add (stream string start end)
  (with-slots (buffer line keep column) stream
    (flet ((keep-line (newline)
             (unless (compiler-line-p line)
               (loop for c across line do (vector-push-extend c buffer))
               (when newline (vector-push-extend #\Newline buffer)))
             (setf (fill-pointer line) 0)))
      (loop for i from start below end
            for c = (char string i)
            do (cond ((char= c #\Newline) (keep-line t))
                     (t (vector-push-extend c line)
                        ;; A line longer than the tail is kept in parts.
                        (when (> (length line) keep) (keep-line nil))))))
    (let ((newline (position #\Newline string :start start :end end :from-end t)))
      (setf column (if newline (- end newline 1) (+ column (- end start)))))
    (when (> (length buffer) (* 2 keep))
      (let ((tail (subseq buffer (- (length buffer) keep))))
        (setf (fill-pointer buffer) 0)
        (loop for c across tail do (vector-push-extend c buffer))))))

(defmethod #.(gray-symbol "STREAM-WRITE-CHAR") ((stream tail-stream) char)
  (write-char char (slot-value stream 'target))
  (tail-add stream (string char) 0 1)
  char)

(defmethod #.(gray-symbol "STREAM-WRITE-STRING") ((stream tail-stream) string
                                                  &optional (start 0) end)
  (let ((end (or end (length string))))
    (write-string string (slot-value stream 'target) :start start :end end)
    (tail-add stream string start end))
  string)

;; The target's column when it is a Gray stream (others may write to it
;; too), else the column of what was written through.
(defmethod #.(gray-symbol "STREAM-LINE-COLUMN") ((stream tail-stream))
  (with-slots (target column) stream
    (or (ignore-errors (#.(gray-symbol "STREAM-LINE-COLUMN") target))
        column)))

(defmethod #.(gray-symbol "STREAM-FORCE-OUTPUT") ((stream tail-stream))
  (force-output (slot-value stream 'target)))

(defmethod #.(gray-symbol "STREAM-FINISH-OUTPUT") ((stream tail-stream))
  (finish-output (slot-value stream 'target)))

(defun tail-text (stream)
  (with-slots (buffer line) stream
    (concatenate 'simple-string buffer (if (compiler-line-p line) "" line))))

(defun call-copying-output (thunk box)
  "Call THUNK with *STANDARD-OUTPUT* and *ERROR-OUTPUT* written through tail
streams, which BOX (a cons) holds while it runs."
  (let* ((out (make-instance 'tail-stream :target *standard-output*))
         (err (make-instance 'tail-stream :target *error-output*))
         (*standard-output* out)
         (*error-output* err))
    (setf (car box) (cons out err))
    (funcall thunk)))

(defun output-tails (box)
  "The tails of the output CALL-COPYING-OUTPUT saw (stdout, a newline,
stderr), or an empty string when it did not run."
  (if (car box)
      (concatenate 'string (tail-text (car (car box))) (string #\Newline)
                   (tail-text (cdr (car box))))
      ""))
