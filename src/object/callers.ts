/**
 * @module
 * Calls awaiting an answer by id, in the object: each `wait(id)` resolves
 * with the one answer given to that id, and an id is answered at most once.
 * The booking book (held requests' turns) and the place book (requests
 * waiting in line for a place) both keep their callers here.
 */
export class Callers<T> {
  private readonly byId = new Map<string, ((answer: T) => void)[]>();

  /** Resolves with the answer `id` is given. */
  wait(id: string): Promise<T> {
    return new Promise((resolve) => {
      const callers = this.byId.get(id);
      if (callers) callers.push(resolve);
      else this.byId.set(id, [resolve]);
    });
  }

  /** Whether a call awaits `id`'s answer. */
  has(id: string): boolean {
    return this.byId.has(id);
  }

  /** The ids that calls await. */
  ids(): IterableIterator<string> {
    return this.byId.keys();
  }

  /** Answers every call awaiting `id`, which then awaits nothing. */
  answer(id: string, answer: T): void {
    const callers = this.byId.get(id);
    if (callers === undefined) return;
    this.byId.delete(id);
    for (const resolve of callers) resolve(answer);
  }

  /** Answers every call awaiting anything with `answer`. */
  answerAll(answer: T): void {
    for (const id of [...this.byId.keys()]) this.answer(id, answer);
  }
}
