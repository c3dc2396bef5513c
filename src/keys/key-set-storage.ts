/** Where the key set lives, as the keys tool reads and changes it. */
export interface KeySetStorage {
  /** How the tool names the place in its messages: `file <path>` or `secret <id>`. */
  where: string;
  read(): Promise<string>;
  /**
   * Applies `edit` to the current text (`undefined` when there is none yet) and stores the result,
   * never losing a change someone else made meanwhile: `edit` may run again on a newer text.
   */
  update(edit: (current: string | undefined) => string): Promise<{ version?: string }>;
  /** Frees connections, so that the command's process can end. */
  close(): void;
}
